package workerconfig

import (
	"strings"
	"testing"
)

func TestSecretValues(t *testing.T) {
	t.Setenv("STEPWISE_SECRET_TEST", "the-value")
	ref := SecretEnv{Env: "STEPWISE_SECRET_TEST", Secret: "openai", Key: "api-key"}
	if v, err := ref.Lookup(); err != nil || v != "the-value" {
		t.Errorf("Lookup() = %q, %v", v, err)
	}
	if v, err := (Value{Name: "h", FromEnv: &ref}).Resolve(); err != nil || v != "the-value" {
		t.Errorf("Resolve() from env = %q, %v", v, err)
	}
	if v, _ := (Value{Name: "h", Value: "inline"}).Resolve(); v != "inline" {
		t.Errorf("Resolve() inline = %q", v)
	}
	missing := SecretEnv{Env: "STEPWISE_SECRET_ABSENT", Secret: "openai", Key: "api-key"}
	_, err := missing.Lookup()
	if err == nil || !strings.Contains(err.Error(), `Secret openai key api-key`) {
		t.Errorf("Lookup() of a missing variable = %v, want an error naming the Secret key", err)
	}
}

func TestResolveCheckedNamesTheSecretNeverTheValue(t *testing.T) {
	t.Setenv("STEPWISE_SECRET_TOKEN", "Bearer s3cr3t\n")
	v := Value{Name: "Authorization", FromEnv: &SecretEnv{Env: "STEPWISE_SECRET_TOKEN", Secret: "tickets", Key: "token"}}
	_, err := v.ResolveChecked(HeaderValueProblem)
	if err == nil || !strings.Contains(err.Error(), "Secret tickets key token contains a control character") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("ResolveChecked() = %v, want an error naming Secret tickets key token and not the value", err)
	}
	t.Setenv("STEPWISE_SECRET_TOKEN", "Bearer s3cr3t\twith a tab")
	if got, err := v.ResolveChecked(HeaderValueProblem); err != nil || got != "Bearer s3cr3t\twith a tab" {
		t.Errorf("ResolveChecked() = %q, %v; a tab is a valid header value byte", got, err)
	}
	// No process environment can hold a NUL byte, so only an inline value
	// shows this one.
	if _, err := (Value{Name: "TOKEN", Value: "a\x00b"}).ResolveChecked(EnvValueProblem); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("ResolveChecked(EnvValueProblem) = %v, want the NUL byte refused", err)
	}
}
