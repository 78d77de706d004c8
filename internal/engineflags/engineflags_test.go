package engineflags_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/engineflags"
	"github.com/stepwise-run/stepwise/internal/render"
)

func TestApplyRefusesWhatNamesNothing(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
		want    render.Defaults
	}{
		{[]string{"--operator-namespace=stepwise-system", "--default-engine=shared"}, "", render.Defaults{DefaultEngine: "shared"}},
		{[]string{"--operator-namespace=stepwise-system", "--allow-namespace-engines"}, "",
			render.Defaults{AllowNamespaceEngines: true}},
		{[]string{"--operator-namespace=stepwise-system", "--default-engine=Not_A_Name"}, "--default-engine Not_A_Name is not a ClusterEngine name", render.Defaults{}},
		{[]string{"--operator-namespace="}, "--operator-namespace (or POD_NAMESPACE) must name", render.Defaults{}},
		{[]string{"--operator-namespace=a.b"}, "--operator-namespace (or POD_NAMESPACE) must name", render.Defaults{}},
	}
	for _, tc := range cases {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		f := engineflags.Bind(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var got render.Defaults
		err := f.Apply(&got)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr == "" && (got.DefaultEngine != tc.want.DefaultEngine || got.AllowNamespaceEngines != tc.want.AllowNamespaceEngines):
			t.Errorf("%v: defaults %+v, want %+v", tc.args, got, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.wantErr)
		}
	}
}
