package framework

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update rewrites the golden files instead of comparing with them:
// go test ./internal/status/ -update, for example.
var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Golden compares got with the golden file testdata/name of the test's
// package, or rewrites that file when the tests run with -update.
func Golden(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update if the change is intended)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
