package engineflags_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/engineflags"
)

func TestEngineRefusesWhatTheAPIWould(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--default-engine-address=temporal-frontend.temporal.svc:7233"}, ""},
		{[]string{"--default-engine-address=temporal-frontend.temporal.svc"},
			"--default-engine-address: engine address \"temporal-frontend.temporal.svc\" must be host:port"},
		{[]string{"--default-engine-address=temporal:0"}, "port from 1 to 65535"},
		{[]string{"--default-engine-address=temporal:7233", "--default-engine-api-key-secret=engine-key"}, "want NAME/KEY"},
		{[]string{"--default-engine-address=temporal:7233", "--default-engine-api-key-secret=engine/key"}, "needs --default-engine-tls"},
		{[]string{"--default-engine-address=temporal:7233", "--default-engine-tls-secret=engine-tls", "--default-engine-api-key-secret=engine/key"}, ""},
	}
	for _, tc := range cases {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		f := engineflags.Bind(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		engine, err := f.Engine()
		switch {
		case tc.wantErr == "" && (err != nil || engine == nil || engine.Address != f.Address):
			t.Errorf("%v: got %+v, %v", tc.args, engine, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.wantErr)
		}
	}
	if engine, err := engineflags.Bind(flag.NewFlagSet("test", flag.ContinueOnError)).Engine(); engine != nil || err != nil {
		t.Errorf("no address: got %+v, %v; want no engine", engine, err)
	}
}
