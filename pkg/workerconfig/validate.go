package workerconfig

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Validate checks what a worker needs before it can start. The operator
// renders only valid documents; this guards hand-written ones.
func (c Config) Validate() error {
	var problems []string
	need := func(ok bool, field string) {
		if !ok {
			problems = append(problems, field+" is required")
		}
	}
	need(c.FlowType != "", "flowType")
	need(c.EngineVersion != "", "engineVersion")
	need(c.Engine.Address != "", "engine.address")
	need(c.Engine.Namespace != "", "engine.namespace")
	need(c.Engine.TaskQueue != "", "engine.taskQueue")
	need(c.Definition.Model.Provider != "", "definition.model.provider")
	need(c.Definition.Model.Name != "", "definition.model.name")
	choices := map[string]bool{}
	for i, mc := range c.Definition.ModelChoices {
		field := fmt.Sprintf("definition.modelChoices[%d]", i)
		need(mc.Choice != "", field+".choice")
		need(mc.Model.Provider != "", field+".model.provider")
		need(mc.Model.Name != "", field+".model.name")
		if choices[mc.Choice] {
			problems = append(problems, fmt.Sprintf("%s.choice %q repeats an earlier choice", field, mc.Choice))
		}
		choices[mc.Choice] = true
	}
	problems = append(problems, c.SpendLimit.problems(c.Definition)...)
	problems = append(problems, c.Tracing.problems()...)
	if c.TaskSlots < 1 {
		problems = append(problems, fmt.Sprintf("taskSlots must be at least 1, not %d", c.TaskSlots))
	}
	seen := map[string]bool{}
	for i, ts := range c.ToolSources {
		if ts.SourceName == "" {
			problems = append(problems, fmt.Sprintf("toolSources[%d].sourceName is required", i))
		} else if seen[ts.SourceName] {
			problems = append(problems, fmt.Sprintf("toolSources[%d].sourceName %q repeats an earlier source", i, ts.SourceName))
		}
		seen[ts.SourceName] = true
		if (ts.Stdio == nil) == (ts.StreamableHTTP == nil) {
			problems = append(problems, fmt.Sprintf("toolSources[%d] needs exactly one of stdio or streamableHTTP", i))
		}
		if s := ts.Stdio; s != nil {
			if strings.TrimSpace(s.Command) != s.Command || s.Command == "" {
				problems = append(problems, fmt.Sprintf("toolSources[%d].stdio.command must name an executable, without surrounding whitespace", i))
			}
			for _, v := range s.Env {
				if p := EnvValueProblem(v.Value); p != "" {
					problems = append(problems, fmt.Sprintf("toolSources[%d].stdio.env[%s]: the value %s", i, v.Name, p))
				}
			}
		}
		if h := ts.StreamableHTTP; h != nil {
			for _, v := range h.Headers {
				if p := HeaderValueProblem(v.Value); p != "" {
					problems = append(problems, fmt.Sprintf("toolSources[%d].streamableHTTP.headers[%s]: the value %s", i, v.Name, p))
				}
			}
		}
	}
	if c.MetricsAddress != "" && c.MetricsAddress == c.HealthAddress {
		problems = append(problems, fmt.Sprintf("metricsAddress: %s is healthAddress too; metrics listen on their own port", c.MetricsAddress))
	}
	if c.DebugAddress != "" {
		if err := CheckLoopback(c.DebugAddress); err != nil {
			problems = append(problems, "debugAddress: "+err.Error())
		}
	}
	if h := c.EventHub; h != nil {
		if err := CheckHubURL(h.URL); err != nil {
			problems = append(problems, "eventHub.url: "+err.Error())
		}
		need(h.Token.Env != "", "eventHub.token.env")
	}
	if m := c.MediaStore; m != nil && (m.S3 == nil) == (m.LocalDirectory == nil) {
		problems = append(problems, "mediaStore needs exactly one of s3 or localDirectory")
	}
	if len(problems) > 0 {
		return errors.New("invalid worker config: " + strings.Join(problems, "; "))
	}
	return nil
}

// parseHTTPURL parses an http or https URL with a host.
func parseHTTPURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%q is not a URL", raw)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: the scheme must be http or https", raw)
	case u.Hostname() == "":
		return nil, fmt.Errorf("%q has no host", raw)
	}
	return u, nil
}

// CheckHubURL accepts an event hub's base URL: http or https, a host, and
// nothing a request would carry elsewhere (credentials, a path, a query).
func CheckHubURL(raw string) error {
	u, err := parseHTTPURL(raw)
	switch {
	case err != nil:
		return err
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("%q: only a scheme, host and port are allowed", raw)
	}
	return nil
}

// CheckLoopback accepts a host:port address whose host is localhost or a
// loopback IP, so that what listens there is unreachable from the pod
// network; an address without a host (":8081") listens on every interface
// and is refused.
func CheckLoopback(address string) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", address, err)
	}
	if port == "" {
		return fmt.Errorf("%q has no port", address)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address: use 127.0.0.1, [::1] or localhost, so that only the pod and port-forwards reach it", address)
}
