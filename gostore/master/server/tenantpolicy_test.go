package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A policy file over maxPolicyBytes is refused before it is read whole,
// valid or not.
func TestAPolicyFileOverTheBoundIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	valid := "version: 1\ntenants: []\n"
	if err := os.WriteFile(path, []byte(valid+"#"+strings.Repeat("x", maxPolicyBytes)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readPolicy(path); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("a policy file over %d bytes: %v", maxPolicyBytes, err)
	}
	if err := os.WriteFile(path, []byte(valid), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, p, err := readPolicy(path); err != nil || p == nil {
		t.Fatalf("a small one: %v, %v", p, err)
	}
}
