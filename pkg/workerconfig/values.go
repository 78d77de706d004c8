package workerconfig

import (
	"fmt"
	"os"
	"strings"
)

// SecretEnv names the environment variable that carries a Secret value, and
// the Secret key it came from, for error messages.
type SecretEnv struct {
	Env    string `json:"env"`
	Secret string `json:"secret"`
	Key    string `json:"key"`
}

// Lookup reads the value from the environment. A missing variable is an
// error that names the Secret key, never a value.
func (s SecretEnv) Lookup() (string, error) {
	v, ok := os.LookupEnv(s.Env)
	if !ok {
		return "", fmt.Errorf("environment variable %s for Secret %s key %s is not set", s.Env, s.Secret, s.Key)
	}
	return v, nil
}

// Value is a value given inline or carried by an environment variable.
type Value struct {
	Name    string     `json:"name"`
	Value   string     `json:"value,omitempty"`
	FromEnv *SecretEnv `json:"fromEnv,omitempty"`
}

// Resolve returns the value.
func (v Value) Resolve() (string, error) {
	if v.FromEnv != nil {
		return v.FromEnv.Lookup()
	}
	return v.Value, nil
}

// ResolveChecked returns the value, or an error when problem finds it
// unusable. The error names the Secret key the value came from, never the
// value.
func (v Value) ResolveChecked(problem func(string) string) (string, error) {
	value, err := v.Resolve()
	if err != nil {
		return "", err
	}
	if p := problem(value); p != "" {
		if v.FromEnv != nil {
			return "", fmt.Errorf("the value of Secret %s key %s %s", v.FromEnv.Secret, v.FromEnv.Key, p)
		}
		return "", fmt.Errorf("the value %s", p)
	}
	return value, nil
}

// HeaderValueProblem says why v can never be sent as an HTTP header value,
// or returns "": a field value holds no control characters other than tab.
// A Secret written from a file with a trailing newline is the usual cause.
func HeaderValueProblem(v string) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return "contains a control character, such as CR or LF, which an HTTP header value cannot carry"
		}
	}
	return ""
}

// EnvValueProblem says why v can never be the value of an environment
// variable, or returns "".
func EnvValueProblem(v string) string {
	if strings.IndexByte(v, 0) >= 0 {
		return "contains a NUL byte, which an environment variable cannot carry"
	}
	return ""
}
