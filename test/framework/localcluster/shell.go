package localcluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ShellCommand runs line, a kubectl command as a user pastes it, in a real
// POSIX shell with a stand-in kubectl that records what it was given, and
// returns the words after the leading flags-free arguments: positional, the
// arguments before the first flag (after "kubectl"), and flags, each
// --name value pair. It proves that the shell reads the line as intended,
// quoting included, without a parser of our own.
func ShellCommand(t testing.TB, line string) (positional []string, flags map[string]string) {
	t.Helper()
	dir := t.TempDir()
	stub := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\000' \"$a\"; done\n"
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Env = append(os.Environ(), "PATH="+dir+":/usr/bin:/bin")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the shell refused the command: %v", err)
	}
	words := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	flags = map[string]string{}
	for i := 0; i < len(words); i++ {
		name, ok := strings.CutPrefix(words[i], "--")
		switch {
		case !ok && len(flags) == 0:
			positional = append(positional, words[i])
		case !ok || i+1 == len(words):
			t.Fatalf("word %d of the command is not a --flag value pair", i)
		default:
			if _, dup := flags[name]; dup {
				t.Fatalf("flag --%s appears twice", name)
			}
			flags[name] = words[i+1]
			i++
		}
	}
	return positional, flags
}
