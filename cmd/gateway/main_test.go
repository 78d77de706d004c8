package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/hub"
)

func TestLocalURLReachesTheHubOfThisProcess(t *testing.T) {
	cases := map[string]string{
		":8090":          "http://127.0.0.1:8090",
		"0.0.0.0:8090":   "http://127.0.0.1:8090",
		"[::]:8090":      "http://127.0.0.1:8090",
		"10.0.0.7:8090":  "http://10.0.0.7:8090",
		"[fd00::1]:8090": "http://[fd00::1]:8090",
	}
	for listen, want := range cases {
		if got, err := localURL(listen); err != nil || got != want {
			t.Errorf("localURL(%q) = %q, %v; want %q", listen, got, err, want)
		}
	}
	if _, err := localURL("8090"); err == nil || !strings.Contains(err.Error(), "--hub-listen") {
		t.Errorf("a listen address without a port: %v, want an error naming --hub-listen", err)
	}
}

func TestCredentialFilesAreRequiredAndChecked(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	long := filepath.Join(dir, "long")
	if err := os.WriteFile(short, []byte("too-short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(long, []byte(strings.Repeat("k", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	for path, wantErr := range map[string]string{
		"":                            "--hub-read-tokens-file is required",
		filepath.Join(dir, "missing"): "--hub-read-tokens-file",
		short:                         short,
		long:                          "",
	} {
		_, err := loadCredential(logger, "--hub-read-tokens-file", path, hub.ParseReadTokens)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("loadCredential(%q) = %v", path, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("loadCredential(%q) = %v, want an error containing %q", path, err, wantErr)
		}
	}
}
