package peering

import (
	"strings"
	"testing"
)

func TestCleanTextKeepsWordsAndDropsWhatRewritesATerminal(t *testing.T) {
	for in, want := range map[string]string{
		"the pod was refused: privileged": "the pod was refused: privileged",
		"\x1b[2J\x1b[Hall good":           "[2J [Hall good",
		"line one\nline two\r\n":          "line one line two",
		"safe\u202Etxt.exe":               "safe txt.exe",
		"zero\u200Bwidth":                 "zero width",
		"bad \xff utf8":                   "bad \uFFFD utf8",
		"\x07bell\x7f":                    "bell",
		"tabs\tand   spaces":              "tabs and spaces",
		"":                                "",
		"ünïcödé and 漢字 stay":             "ünïcödé and 漢字 stay",
		"osc 8 link \x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\": "osc 8 link ]8;;http://evil \\click ]8;; \\",
	} {
		if got := CleanText(in); got != want {
			t.Errorf("CleanText(%q) = %q, want %q", in, got, want)
		}
	}
	long := CleanText(strings.Repeat("é", 2*MaxPeerText))
	if len(long) > MaxPeerText || !strings.HasPrefix(long, "é") || strings.ContainsRune(long, '\uFFFD') {
		t.Errorf("a long text is cut to %d bytes, want at most %d on a rune boundary", len(long), MaxPeerText)
	}
}

func TestCleanReasonKeepsOnlyWhatTheAPIAccepts(t *testing.T) {
	for in, want := range map[string]string{
		"ProviderFailed":       "ProviderFailed",
		"Refused:Privileged_1": "Refused:Privileged_1",
		"two words":            "Fallback",
		"\x1b[31mRed":          "Fallback",
		"":                     "Fallback",
		"9Lives":               "Fallback",
	} {
		if got := CleanReason(in, "Fallback"); got != want {
			t.Errorf("CleanReason(%q) = %q, want %q", in, got, want)
		}
	}
}
