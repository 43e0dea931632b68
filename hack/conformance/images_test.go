package main

import (
	"slices"
	"testing"
)

func TestTheSuitesImagesAreReadFromItsList(t *testing.T) {
	// e2e.test --list-images at v1.37.2, abridged.
	list := `gcr.io/k8s-authenticated-test/agnhost:2.6
registry.k8s.io/e2e-test-images/busybox:1.36.1-1
registry.k8s.io/e2e-test-images/agnhost:2.55
registry.k8s.io/e2e-test-images/nonewprivs:1.4
registry.k8s.io/e2e-test-images/busybox:1.37.0-2
registry.k8s.io/e2e-test-images/nginx:1.27.0-2
registry.k8s.io/pause:3.10.2
registry.k8s.io/e2e-test-images/agnhost:2.66.1
`
	got, err := parseSuiteRefs(list)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ got, want []string }{
		"busybox":    {got.Busybox, []string{"registry.k8s.io/e2e-test-images/busybox:1.36.1-1", "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"}},
		"agnhost":    {got.Agnhost, []string{"registry.k8s.io/e2e-test-images/agnhost:2.55", "registry.k8s.io/e2e-test-images/agnhost:2.66.1"}},
		"nonewprivs": {got.Nonewprivs, []string{"registry.k8s.io/e2e-test-images/nonewprivs:1.4"}},
		"pause":      {got.Pause, []string{"registry.k8s.io/pause:3.10.2"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %v, want %v", name, c.got, c.want)
		}
	}
	if _, err := parseSuiteRefs("registry.k8s.io/pause:3.10.2\n"); err == nil {
		t.Error("a list without busybox, agnhost and nonewprivs was taken")
	}
}
