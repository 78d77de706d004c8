package kubectlstepwise

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"

	"go.yaml.in/yaml/v3"

	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// command is one session command: its arguments after the Agent and the
// session, and the request it sends.
type command struct {
	args string
	// min is the arguments it needs after the Agent and the session.
	min     int
	request func(p *plugin, args []string) (method, path string, body any, err error)
}

func joined(args []string) string { return strings.Join(args, " ") }

// commands are the session commands that answer whether the session took
// the request.
var commands = map[string]command{
	"start": {"[message]", 0, func(p *plugin, a []string) (string, string, any, error) {
		return http.MethodPost, "", gatewayapi.StartRequest{Message: joined(a), RequestID: p.requestID()}, nil
	}},
	"send": {"<message>", 1, func(p *plugin, a []string) (string, string, any, error) {
		return http.MethodPost, "/messages", gatewayapi.SendRequest{Text: joined(a), RequestID: p.requestID()}, nil
	}},
	"plan": {"<message>", 1, func(p *plugin, a []string) (string, string, any, error) {
		return http.MethodPost, "/messages", gatewayapi.SendRequest{Text: joined(a), PlanMode: true, RequestID: p.requestID()}, nil
	}},
	"steer": {"<message>", 1, func(p *plugin, a []string) (string, string, any, error) {
		return http.MethodPost, "/steer", gatewayapi.SteerRequest{Text: joined(a), RequestID: p.requestID()}, nil
	}},
	"steer-queued": {"<message-id>", 1, func(p *plugin, a []string) (string, string, any, error) {
		return http.MethodPost, "/steer", gatewayapi.SteerRequest{QueuedMessageID: a[0], RequestID: p.requestID()}, nil
	}},
	"delete-queued": {"<message-id>", 1, func(p *plugin, a []string) (string, string, any, error) {
		return http.MethodDelete, "/queued/" + url.PathEscape(a[0]), gatewayapi.RequestBody{RequestID: p.requestID()}, nil
	}},
	"approve": {"<interrupt>", 1, func(p *plugin, a []string) (string, string, any, error) {
		return http.MethodPost, "/interrupts/" + url.PathEscape(a[0]) + "/approve", gatewayapi.RequestBody{RequestID: p.requestID()}, nil
	}},
	"reject": {"<interrupt> [why]", 1, func(p *plugin, a []string) (string, string, any, error) {
		return http.MethodPost, "/interrupts/" + url.PathEscape(a[0]) + "/reject", gatewayapi.RejectRequest{Message: joined(a[1:]), RequestID: p.requestID()}, nil
	}},
	"answer": {"<interrupt> <answer>", 2, func(p *plugin, a []string) (string, string, any, error) {
		return http.MethodPost, "/interrupts/" + url.PathEscape(a[0]) + "/answer", gatewayapi.AnswerRequest{Answer: joined(a[1:]), RequestID: p.requestID()}, nil
	}},
	"cancel": {"<turn>", 1, func(p *plugin, a []string) (string, string, any, error) {
		return http.MethodPost, "/turns/" + url.PathEscape(a[0]) + "/cancel", gatewayapi.RequestBody{RequestID: p.requestID()}, nil
	}},
	"execute-plan": {"<revision>", 1, func(p *plugin, a []string) (string, string, any, error) {
		revision, err := strconv.Atoi(a[0])
		if err != nil || revision < 1 {
			return "", "", nil, fmt.Errorf("revision must be a plan revision number, not %q", a[0])
		}
		return http.MethodPost, "/plan/execute", gatewayapi.ExecutePlanRequest{Revision: revision, RequestID: p.requestID()}, nil
	}},
	"settings": {"<json>", 1, func(p *plugin, a []string) (string, string, any, error) {
		var settings sessions.SessionSettings
		if err := json.Unmarshal([]byte(joined(a)), &settings); err != nil || settings == nil {
			return "", "", nil, errors.New(`settings must be a JSON object such as {"model":"large"}`)
		}
		return http.MethodPut, "/settings", gatewayapi.SettingsRequest{Settings: settings, RequestID: p.requestID()}, nil
	}},
}

// requestID is the flag's, or a new one, so a pending request can be sent
// again as itself.
func (p *plugin) requestID() string {
	if p.o.requestID == "" {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		p.o.requestID = "kubectl-" + hex.EncodeToString(b)
	}
	return p.o.requestID
}

func (p *plugin) run(ctx context.Context, args []string, out io.Writer) (int, error) {
	name, args := args[0], args[1:]
	if name == "waiting" {
		return 0, p.waiting(ctx, out)
	}
	if name == "get" || name == "messages" {
		if len(args) < 2 {
			return exitUsage, fmt.Errorf("%s needs <agent> <session>", name)
		}
		if name == "get" {
			return 0, p.get(ctx, args[0], args[1], out)
		}
		return 0, p.messages(ctx, args[0], args[1], args[2:], out)
	}
	cmd, ok := commands[name]
	if !ok {
		return exitUsage, fmt.Errorf("unknown command %q; run kubectl stepwise -h", name)
	}
	if len(args) < 2+cmd.min {
		return exitUsage, fmt.Errorf("%s needs <agent> <session> %s", name, cmd.args)
	}
	method, path, body, err := cmd.request(p, args[2:])
	if err != nil {
		return exitUsage, err
	}
	var raw json.RawMessage
	status, err := p.do(ctx, method, p.sessionPath(args[0], args[1])+path, body, &raw)
	if err != nil {
		return 0, err
	}
	if status == http.StatusAccepted {
		var pending gatewayapi.Pending
		if err := json.Unmarshal(raw, &pending); err != nil {
			return 0, fmt.Errorf("the gateway's answer is not the JSON expected: %w", err)
		}
		if err := p.print(out, pending, "pending"); err != nil {
			return 0, err
		}
		return exitPending, fmt.Errorf("%s\nrun the same command with --request-id %s to learn its outcome", printable(pending.Message), printable(pending.RequestID))
	}
	var answer gatewayapi.Accepted
	if err := json.Unmarshal(raw, &answer); err != nil {
		return 0, fmt.Errorf("the gateway's answer is not the JSON expected: %w", err)
	}
	if err := p.print(out, answer, strconv.FormatBool(answer.Accepted)); err != nil {
		return 0, err
	}
	if !answer.Accepted {
		return exitFalse, nil
	}
	return 0, nil
}

func (p *plugin) sessionPath(agent, session string) string {
	return "/api/v1/namespaces/" + url.PathEscape(p.namespace) + "/agents/" + url.PathEscape(agent) + "/sessions/" + url.PathEscape(session)
}

// do sends a request and decodes a 200 or 202 answer into out; any other
// answer is an error with the gateway's reason and message.
func (p *plugin) do(ctx context.Context, method, path string, body, out any) (int, error) {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		reader = bytes.NewReader(raw)
	}
	u := p.base.JoinPath(strings.SplitN(path, "?", 2)[0])
	if i := strings.IndexByte(path, '?'); i >= 0 {
		u.RawQuery = path[i+1:]
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), reader)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("calling the gateway: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, fmt.Errorf("reading the gateway's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		var refusal gatewayapi.ErrorBody
		if json.Unmarshal(raw, &refusal) != nil || refusal.Reason == "" {
			return 0, fmt.Errorf("the gateway answered %s: %.200s", printable(resp.Status), printable(string(raw)))
		}
		return 0, fmt.Errorf("%s: %s", printable(refusal.Reason), printable(refusal.Message))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return 0, fmt.Errorf("the gateway's answer is not the JSON expected: %w", err)
	}
	return resp.StatusCode, nil
}

// print writes v as JSON or YAML, or the table for the default output.
func (p *plugin) print(out io.Writer, v any, table string) error {
	switch p.o.output {
	case "json":
		raw, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		// The encoder escapes C0 controls only; every hidden character is
		// inside a string, where \u escapes keep the value exact.
		_, err = io.WriteString(out, escapeHidden(string(raw), jsonEscape)+"\n")
		return err
	case "yaml":
		raw, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return err
		}
		quoteHidden(&doc)
		var b bytes.Buffer
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(&doc); err != nil {
			return err
		}
		if err := enc.Close(); err != nil {
			return err
		}
		// What YAML counts printable (bidirectional overrides among it)
		// is left raw even in double quotes, where \u escapes are exact.
		_, err = io.WriteString(out, escapeHidden(b.String(), yamlEscape))
		return err
	}
	_, err := io.WriteString(out, table+"\n")
	return err
}

func (p *plugin) get(ctx context.Context, agent, session string, out io.Writer) error {
	var resp gatewayapi.SnapshotResponse
	if _, err := p.do(ctx, http.MethodGet, p.sessionPath(agent, session)+"/snapshot", nil, &resp); err != nil {
		return err
	}
	return p.print(out, resp, snapshotTable(resp.Snapshot))
}

func snapshotTable(snap sessions.Snapshot) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "STATUS\tMODE\tACTIVE TURN\tTURNS\tPENDING\tQUEUED\tTOKENS")
	if st := snap.State; st != nil {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", cell(st.Status), cell(st.Mode), cell(st.ActiveTurnID), st.TurnCount,
			len(snap.PendingInterrupts), len(snap.QueuedMessages), snap.Usage.InputTokens+snap.Usage.OutputTokens)
	} else {
		fmt.Fprintln(w, "starting\t-\t-\t0\t0\t0\t0")
	}
	if len(snap.PendingInterrupts) > 0 {
		fmt.Fprintln(w, "\nINTERRUPT\tKIND\tTOOL\tASKED BY\tASKS")
		for _, i := range snap.PendingInterrupts {
			asks := i.Arguments
			if i.Question != nil {
				asks = i.Question.Text
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", cell(i.ID), cell(i.Kind), cell(i.ToolName), cell(i.AskedBy), clip(asks))
		}
	}
	if len(snap.ToolCalls) > 0 {
		fmt.Fprintln(w, "\nTOOL CALL\tTOOL\tEFFECT\tSTATUS")
		for _, c := range snap.ToolCalls {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", cell(c.ID), cell(c.Name), cell(c.Effect), cell(c.Status))
		}
	}
	_ = w.Flush()
	return strings.TrimRight(b.String(), "\n")
}

func (p *plugin) messages(ctx context.Context, agent, session string, args []string, out io.Writer) error {
	query := url.Values{}
	if len(args) > 0 && args[0] != "0" {
		query.Set("beforeSequence", args[0])
	}
	if len(args) > 1 {
		query.Set("limit", args[1])
	}
	var page sessions.MessagesPage
	if _, err := p.do(ctx, http.MethodGet, p.sessionPath(agent, session)+"/messages?"+query.Encode(), nil, &page); err != nil {
		return err
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SEQUENCE\tTURN\tROLE\tTEXT")
	for _, m := range page.Messages {
		text := m.Text
		if m.Role == sessions.RoleTool {
			text = m.ToolName + ": " + text
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", m.Sequence, cell(m.TurnID), cell(m.Role), clip(text))
	}
	_ = w.Flush()
	return p.print(out, page, strings.TrimRight(b.String(), "\n"))
}

func (p *plugin) waiting(ctx context.Context, out io.Writer) error {
	path := "/api/v1/namespaces/" + url.PathEscape(p.namespace) + "/waiting"
	if p.o.allNamespaces {
		path = gatewayapi.WaitingPath
	}
	query := url.Values{"step": p.o.steps}
	var resp gatewayapi.WaitingResponse
	if _, err := p.do(ctx, http.MethodGet, path+"?"+query.Encode(), nil, &resp); err != nil {
		return err
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tAGENT\tSESSION\tWAITS IN\tAGE")
	for _, s := range resp.Sessions {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", cell(s.Namespace), cell(s.Agent), cell(s.SessionID), cell(strings.Join(s.Steps, ",")), age(s.StartTime))
	}
	_ = w.Flush()
	table := strings.TrimRight(b.String(), "\n")
	if resp.Truncated {
		table += "\n(more sessions wait; narrow the search with -n or --step)"
	}
	for _, u := range resp.Unavailable {
		table += fmt.Sprintf("\nnot searched: Agent %s/%s: %s: %s", printable(u.Namespace), printable(u.Agent), printable(u.Reason), printable(u.Message))
	}
	return p.print(out, resp, table)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clip keeps a table row on one line, and its text to 60 characters.
func clip(s string) string {
	s = printable(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > 60 {
		return string(r[:59]) + "…"
	}
	return dash(s)
}

// cell is a table cell: printable, one line, a dash when empty.
func cell[T ~string](v T) string { return dash(printable(string(v))) }

// printable escapes what a terminal would obey rather than show: control
// characters (escape sequences, a bell, a carriage return that overwrites
// the line, C1 controls) and format characters such as bidirectional
// overrides, which reorder what the reader sees. A model, a tool or a user
// wrote most of what the plugin prints, and none of them may retitle the
// terminal, move its cursor or make text read as something else.
func printable(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !hidden(r):
			b.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

func hidden(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }

// escapeHidden escapes every hidden character of an encoded document but
// its line breaks.
func escapeHidden(doc string, escape func(*strings.Builder, rune)) string {
	if !strings.ContainsFunc(doc, func(r rune) bool { return r != '\n' && hidden(r) }) {
		return doc
	}
	var b strings.Builder
	for _, r := range doc {
		if r != '\n' && hidden(r) {
			escape(&b, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// jsonEscape writes r as JSON's \u escape, a surrogate pair beyond the
// Basic Multilingual Plane.
func jsonEscape(b *strings.Builder, r rune) {
	if r1, r2 := utf16.EncodeRune(r); r1 != unicode.ReplacementChar {
		fmt.Fprintf(b, "\\u%04x\\u%04x", r1, r2)
		return
	}
	fmt.Fprintf(b, "\\u%04x", r)
}

// yamlEscape writes r as a YAML double-quoted scalar's escape.
func yamlEscape(b *strings.Builder, r rune) {
	if r > 0xffff {
		fmt.Fprintf(b, "\\U%08x", r)
		return
	}
	fmt.Fprintf(b, "\\u%04x", r)
}

// quoteHidden double-quotes every string, key or value, that holds a
// hidden character: only there can escapeHidden's escapes stand for it.
func quoteHidden(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && strings.ContainsFunc(n.Value, hidden) {
		n.Style = yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		quoteHidden(c)
	}
}

// age is a duration as kubectl shows ages.
func age(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
