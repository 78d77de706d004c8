package kubectlstepwise

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	sessions "github.com/stepwise-run/stepwise/pkg/client"
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

func TestWhatOthersWroteCannotDriveTheTerminal(t *testing.T) {
	cases := map[string]string{
		"plain text, é and 日本":        "plain text, é and 日本",
		"\x1b]0;owned\x07title":       `\x1b]0;owned\x07title`,
		"\x1b[2J\x1b[Hclear":          `\x1b[2J\x1b[Hclear`,
		"approve\rreject":             `approve\x0dreject`,
		"\u009b31m C1":                `\u009b31m C1`,
		"evil\u202etxt.exe":           `evil\u202etxt.exe`,
		"zero\u200bwidth":             `zero\u200bwidth`,
		"del\x7f":                     `del\x7f`,
		"tab\tand\nnewline in a cell": `tab\x09and\x0anewline in a cell`,
	}
	for in, want := range cases {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
	if got, want := clip("\x1b[31mred\x1b[0m\nnext"), `\x1b[31mred\x1b[0m next`; got != want {
		t.Errorf("clip = %q, want %q", got, want)
	}
	// JSON and YAML carry the same text escaped, so -o json and -o yaml
	// print no control character either.
	snap := sessions.Snapshot{PendingInterrupts: []sessions.Interrupt{{ID: "i-1", ToolName: "\x1b]0;x\x07", Arguments: "\u202e\x1b[2J \U000e0041 tag", TurnID: "line\nbreak\ttab"}}}
	for _, output := range []string{"json", "yaml"} {
		var out bytes.Buffer
		p := &plugin{o: options{output: output}}
		if err := p.print(&out, snap, snapshotTable(snap)); err != nil {
			t.Fatal(err)
		}
		if strings.ContainsFunc(out.String(), func(r rune) bool { return r != '\n' && hidden(r) }) {
			t.Errorf("-o %s printed a control character:\n%q", output, out.String())
		}
		// Escaped, not altered: a program reading the output gets the
		// text as written.
		var back sessions.Snapshot
		read := func(b []byte, v any) error { return yaml.Unmarshal(b, v) }
		if output == "json" {
			read = json.Unmarshal
		}
		if err := read(out.Bytes(), &back); err != nil || len(back.PendingInterrupts) != 1 ||
			back.PendingInterrupts[0] != snap.PendingInterrupts[0] {
			t.Errorf("-o %s read back = %+v, %v; want %+v", output, back.PendingInterrupts, err, snap.PendingInterrupts)
		}
	}
	table := snapshotTable(snap)
	if strings.ContainsFunc(table, func(r rune) bool { return r != '\n' && hidden(r) }) || !strings.Contains(table, `\x1b]0;x\x07`) {
		t.Errorf("the table shows the tool name unescaped:\n%q", table)
	}
}

// A gateway, or whatever answers at its URL, that redirects elsewhere gets
// no credential sent on: the transport adds it to every request, so the
// client must not follow.
func TestTheCredentialNeverFollowsARedirectToAnotherOrigin(t *testing.T) {
	var elsewhere atomic.Int32
	var leaked atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		leaked.Store(r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusOK)
	}))
	defer other.Close()
	sameOriginHops := 0
	gatewayServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("hop") == "" && strings.HasSuffix(r.URL.Path, "/snapshot"):
			// A redirect within the gateway's own origin is followed.
			sameOriginHops++
			http.Redirect(w, r, r.URL.Path+"?hop=1", http.StatusTemporaryRedirect)
		default:
			http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
		}
	}))
	defer gatewayServer.Close()

	for _, args := range [][]string{
		{"get", "support", "s-1"},
		{"approve", "support", "s-1", "i-1"},
	} {
		var out, errOut bytes.Buffer
		env := map[string]string{"STEPWISE_GATEWAY": gatewayServer.URL, "STEPWISE_TOKEN": "secret-token"}
		status := Run(t.Context(), append(args, "-n", "team-a"), func(k string) string { return env[k] }, &out, &errOut)
		if status != exitError || !strings.Contains(errOut.String(), "another origin") {
			t.Errorf("%v = %d %q %q, want 1 and a refused redirect", args, status, out.String(), errOut.String())
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the other origin got %d requests (Authorization %q)", n, leaked.Load())
	}
	if sameOriginHops != 1 {
		t.Errorf("same-origin redirects followed = %d, want 1", sameOriginHops)
	}
}
