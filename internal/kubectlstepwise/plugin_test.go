package kubectlstepwise

import (
	"flag"
	"slices"
	"testing"
	"time"
)

func TestFlagsGoAnywhereOnTheCommandLine(t *testing.T) {
	cases := []struct {
		args       []string
		positional []string
		namespace  string
		output     string
	}{
		{[]string{"get", "support", "s-1"}, []string{"get", "support", "s-1"}, "", "table"},
		{[]string{"-n", "team-a", "get", "support", "s-1"}, []string{"get", "support", "s-1"}, "team-a", "table"},
		{[]string{"get", "support", "-o", "json", "s-1", "-n=team-b"}, []string{"get", "support", "s-1"}, "team-b", "json"},
		// After --, a word that looks like a flag is an argument.
		{[]string{"send", "support", "s-1", "--", "-n", "is", "-o", "text"}, []string{"send", "support", "s-1", "-n", "is", "-o", "text"}, "", "table"},
		{[]string{"-o", "yaml", "send", "support", "s-1", "--", "--"}, []string{"send", "support", "s-1", "--"}, "", "yaml"},
	}
	for _, tc := range cases {
		flags := flag.NewFlagSet("test", flag.ContinueOnError)
		namespace := flags.String("n", "", "")
		output := flags.String("o", "table", "")
		got, err := parseInterleaved(flags, tc.args)
		if err != nil || !slices.Equal(got, tc.positional) || *namespace != tc.namespace || *output != tc.output {
			t.Errorf("%q = %q -n %q -o %q, %v", tc.args, got, *namespace, *output, err)
		}
	}
}

func TestTableCellsStayOnOneLine(t *testing.T) {
	cases := map[string]string{
		"":                      "-",
		"two\nlines":            "two lines",
		string(make([]rune, 0)): "-",
		"ééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé": "ééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé…",
	}
	for in, want := range cases {
		if got := clip(in); got != want {
			t.Errorf("clip(%q) = %q, want %q", in, got, want)
		}
	}
	for d, want := range map[time.Duration]string{30 * time.Second: "30s", 5 * time.Minute: "5m", 3 * time.Hour: "3h", 72 * time.Hour: "3d"} {
		if got := age(time.Now().Add(-d)); got != want {
			t.Errorf("age of %v = %q, want %q", d, got, want)
		}
	}
}
