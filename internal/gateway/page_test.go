package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/browsertest"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/testtools"
)

// TestTheWebPageDrivesASessionInHeadlessChromium runs the page in a real
// browser against a gateway, an event hub, a Temporal dev server and a
// worker: the script under testdata clicks through it as a person would,
// and keeps a screenshot of each stage.
func TestTheWebPageDrivesASessionInHeadlessChromium(t *testing.T) {
	testtools.BrowserDriver.Path(t)
	testtools.Chromium.Path(t)
	f := start(t)

	// The script cuts the page's event stream through this control server,
	// as a dropped network would.
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/cut" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]int{"cut": f.streams.cut()})
	}))
	t.Cleanup(control.Close)

	browsertest.Run(t, filepath.Join("testdata", "page.test.mjs"), "browser", map[string]string{
		"STEPWISE_PAGE_GATEWAY":      f.gateway,
		"STEPWISE_PAGE_CONTROL":      control.URL,
		"STEPWISE_PAGE_TOKEN":        operatorToken,
		"STEPWISE_PAGE_READER_TOKEN": readerToken,
	})

	// The approval was clicked twice, and the tool ran once.
	ranOnce(t, f, "write_approved")
	// After the cut the page resumed from the last event it had, not from
	// the snapshot's token again.
	ids := f.streams.requests()
	resumed := false
	for i := 1; i < len(ids); i++ {
		if ids[i] != "" && ids[i] != ids[0] {
			resumed = true
		}
	}
	if !resumed {
		t.Errorf("the page's event stream requests carried Last-Event-ID %q: none resumed after the cut", ids)
	}
	// The page's answers to the approval, the question and Stop are the
	// session's.
	final := snapshot(t, f, "s-page")
	var texts []string
	for _, m := range final.Snapshot.Messages {
		texts = append(texts, m.Text)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"results: write_approved=", "blue"} {
		if !strings.Contains(all, want) {
			t.Errorf("the session's messages lack %q:\n%s", want, all)
		}
	}
	if final.Snapshot.State.ActiveTurnID != "" {
		t.Errorf("a turn still runs after the page stopped it: %+v", final.Snapshot.State)
	}
}

func TestThePageIsServedWithHeadersThatKeepItToItsOwnFiles(t *testing.T) {
	f := start(t)
	resp, err := http.Get(f.gateway + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.Request.URL.Path != gatewayapi.PagePath {
		t.Errorf("/ led to %s, want the page at %s", resp.Request.URL.Path, gatewayapi.PagePath)
	}
	for _, file := range []string{"", "app.js", "style.css"} {
		resp, err := http.Get(f.gateway + gatewayapi.PagePath + file)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s = %d", file, resp.StatusCode)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", file, csp, want)
			}
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", file)
		}
	}
	// The graph route authorizes like the session routes.
	var refusal gatewayapi.ErrorBody
	graph := f.gateway + "/api/v1/namespaces/team-a/agents/support/graph"
	if status := call(t, http.MethodGet, graph, otherNSToken, nil, &refusal); status != http.StatusForbidden {
		t.Errorf("the graph with another namespace's token = %d %+v", status, refusal)
	}
	if status := call(t, http.MethodGet, graph, "", nil, &refusal); status != http.StatusUnauthorized {
		t.Errorf("the graph with no token = %d %+v", status, refusal)
	}
	var doc struct {
		FlowType string `json:"flowType"`
		Steps    []struct {
			Name string `json:"name"`
		} `json:"steps"`
	}
	if status := call(t, http.MethodGet, graph, readerToken, nil, &doc); status != http.StatusOK || doc.FlowType != "GatewaySupport" || len(doc.Steps) == 0 {
		t.Errorf("the graph = %d %+v", status, doc)
	}
	if status := call(t, http.MethodGet, f.gateway+"/api/v1/namespaces/team-a/agents/ghost/graph", operatorToken, nil, &refusal); status != http.StatusNotFound {
		t.Errorf("the graph of an Agent that does not exist = %d %+v", status, refusal)
	}
}
