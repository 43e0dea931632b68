package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestCreateMakesAWorldWritableDirectoryAndDeleteRemovesIt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pvc-1_default_data")
	if err := run([]string{"-p", dir, "-s", "1048576", "-m", "Filesystem", "-a", "create"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !info.IsDir() || info.Mode().Perm() != 0o777 {
		t.Errorf("created %s with mode %v, want a directory with mode 0777", dir, info.Mode())
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-p", dir, "-s", "1048576", "-m", "Filesystem", "-a", "delete"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there after delete: %v", dir, err)
	}
}

func TestItRefusesAnUnclearRequest(t *testing.T) {
	for _, args := range [][]string{
		{"-p", "relative/dir", "-a", "create"},
		{"-p", "/", "-a", "delete"},
		{"-p", "/tmp/x", "-a", "resize"},
		{"-a", "create"},
	} {
		if err := run(args, io.Discard); err == nil {
			t.Errorf("%q succeeded; want an error", args)
		}
	}
}
