package v1alpha1

import (
	"regexp"
	"strings"
	"testing"
)

func TestTwinNamespaceIsNSConsumerHash6AndAValidName(t *testing.T) {
	dns1123 := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	got := TwinNamespace("demo", "consumer", "11111111-2222-4333-8444-555555555555")
	if !regexp.MustCompile(`^demo-consumer-[0-9a-f]{6}$`).MatchString(got) {
		t.Errorf("TwinNamespace = %q, want demo-consumer-<hash6>", got)
	}
	if again := TwinNamespace("demo", "consumer", "11111111-2222-4333-8444-555555555555"); again != got {
		t.Errorf("TwinNamespace is not stable: %q then %q", got, again)
	}
	if other := TwinNamespace("demo", "consumer", "11111111-2222-4333-8444-666666666666"); other == got {
		t.Errorf("two consumers with the same name share twin namespace %q", got)
	}
	long := TwinNamespace(strings.Repeat("n", 60), strings.Repeat("c", 30), "id")
	if len(long) > 63 || !dns1123.MatchString(long) {
		t.Errorf("TwinNamespace of long names = %q (%d characters), want a valid name of at most 63", long, len(long))
	}
	dash := TwinNamespace(strings.Repeat("a", 55)+"-b", "c", "id")
	if !dns1123.MatchString(dash) {
		t.Errorf("TwinNamespace cut at a dash = %q, not a valid name", dash)
	}
}
