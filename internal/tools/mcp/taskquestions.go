package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// question is an input request that fits a session question: one form
// elicitation with a single string, enum or boolean field.
type question struct {
	key, fingerprint, field, kind string
	text                          string
	choices                       []string
}

// fittingQuestion reads a task's input requests as one session question;
// ok is false for any other request, and describe names each.
func fittingQuestion(t *Task) (q question, ok bool) {
	if len(t.InputRequests) != 1 {
		return question{}, false
	}
	for key, req := range t.InputRequests {
		if req.Method != "elicitation/create" {
			return question{}, false
		}
		var params struct {
			Mode            string `json:"mode"`
			Message         string `json:"message"`
			RequestedSchema struct {
				Properties map[string]struct {
					Type string   `json:"type"`
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"requestedSchema"`
		}
		if json.Unmarshal(req.Params, &params) != nil || (params.Mode != "" && params.Mode != "form") ||
			len(params.RequestedSchema.Properties) != 1 {
			return question{}, false
		}
		sum := sha256.Sum256(req.Params)
		q = question{key: key, fingerprint: hex.EncodeToString(sum[:8]), text: params.Message}
		for field, prop := range params.RequestedSchema.Properties {
			q.field = field
			switch prop.Type {
			case "boolean":
				q.kind, q.choices = "boolean", []string{"yes", "no"}
			case "string":
				q.kind, q.choices = "string", prop.Enum
			default:
				return question{}, false
			}
		}
		return q, strings.TrimSpace(q.text) != ""
	}
	return question{}, false
}

// describeTaskRequests names each input a task asked for.
func describeTaskRequests(t *Task) string {
	var out []string
	for _, key := range slices.Sorted(maps.Keys(t.InputRequests)) {
		req := t.InputRequests[key]
		var params struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(req.Params, &params)
		out = append(out, describeRequest(req.Method, params.Message))
	}
	return strings.Join(out, ", ")
}

// inputRequired turns a task's input request into a session question, or
// fails the call and cancels the task when it does not fit.
func (p *taskPoller) inputRequired(ctx context.Context, t *Task) (agent.ToolOutput, error) {
	q, fits := fittingQuestion(t)
	if !fits {
		cancelBounded(ctx, p.cs, t.TaskID, p.server.connectionTimeout())
		return agent.ToolOutput{}, agent.Failed("%s (%s)", inputRequestPrefix, describeTaskRequests(t))
	}
	if at := p.state.AnsweredAt; at != nil && q.key == p.state.Key && q.fingerprint == p.state.Fingerprint &&
		time.Since(*at) < answerSettleTime {
		// The task has not taken the answer in yet.
		return agent.ToolOutput{}, agent.StillRunning(time.Second, p.state.encode())
	}
	next := taskState{
		Status: t.Status, Interval: p.state.Interval,
		Key: q.key, Fingerprint: q.fingerprint, Field: q.field, Kind: q.kind,
	}
	return agent.ToolOutput{}, &agent.InputRequest{
		Question: q.text, Choices: q.choices, AllowsFreeText: len(q.choices) == 0, Continuation: next.encode(),
	}
}

// deliver sends a question's resolution with tasks/update, only while the
// task still lists that same request, and only on the poll's first
// attempt; a retried attempt cannot tell whether the first sent it, so it
// asks again. done is true when the poll's outcome is decided here.
func (p *taskPoller) deliver(ctx context.Context, answer *agent.QuestionAnswer) (done bool, err error) {
	asked := readTaskState(p.poll.Continuation)
	t, err := p.read(ctx)
	if err != nil {
		return true, err
	}
	q, fits := fittingQuestion(t)
	stillAsks := t.Status == taskInputRequired && fits && q.key == asked.Key && q.fingerprint == asked.Fingerprint
	if !stillAsks {
		// The task moved on: the answer goes nowhere, and the poll reads
		// the task as it is.
		p.state = taskState{Status: asked.Status, Interval: asked.Interval}
		return false, nil
	}
	if p.poll.Attempt > 1 {
		return true, &agent.InputRequest{
			Question: q.text, Choices: q.choices, AllowsFreeText: len(q.choices) == 0, Continuation: asked.encode(),
		}
	}
	p.poll.Heartbeat()
	response := &mcp.ElicitResult{}
	switch answer.Resolution {
	case agent.QuestionAnswered:
		response.Action = "accept"
		var value any = answer.Answer
		if asked.Kind == "boolean" {
			value = answer.Answer == "yes"
		}
		response.Content = map[string]any{asked.Field: value}
	case agent.QuestionDeclined:
		response.Action = "decline"
	default:
		response.Action = "cancel"
	}
	_, err = mcp.CallCustomMethod[*taskUpdateParams, *ackResult](ctx, p.cs, "tasks/update", &taskUpdateParams{
		TaskID: p.poll.TaskID, InputResponses: map[string]*mcp.ElicitResult{asked.Key: response},
	})
	if err != nil && answer.Resolution == agent.QuestionDeclined {
		// A decline the task did not take: cancel it and end the call.
		// The request budget may be spent: the cancel gets its own.
		cancelBounded(context.WithoutCancel(ctx), p.cs, p.poll.TaskID, p.server.connectionTimeout())
		return true, lostTask(p.poll.Effect, fmt.Sprintf("MCP task %s did not take the declined answer: %v", p.poll.TaskID, err))
	}
	if err != nil {
		return true, err
	}
	now := time.Now()
	asked.AnsweredAt = &now
	asked.Declined = answer.Resolution == agent.QuestionDeclined
	return true, agent.StillRunning(time.Second, asked.encode())
}
