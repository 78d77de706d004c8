// Command testworker is the worker the engine integration tests run as a
// child process: the stock worker with tools and a model that stop at file
// gates and log every real call, so a test can kill it at an exact point and
// count what ran.
package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/worker"
)

type noteArgs struct {
	Note string `json:"note"`
}

func main() {
	dir := os.Getenv("STEPWISE_TEST_DIR")
	calls := &enginetest.Log{Path: filepath.Join(dir, "calls.log")}
	models := &enginetest.Log{Path: filepath.Join(dir, "models.log")}
	gated := func(name string, effect agent.Effect, opts ...agent.ToolOption) agent.Tool {
		return agent.MustTool(name, "Records the call and stops at its gate.", effect,
			func(ctx context.Context, call agent.ToolContext, a noteArgs) (string, error) {
				if err := calls.Append(name, call.IdempotencyKey, strconv.Itoa(call.Attempt), strconv.Itoa(os.Getpid())); err != nil {
					return "", err
				}
				if err := (enginetest.Gate{Dir: dir, Name: name}).Pass(ctx); err != nil {
					return "", err
				}
				return name + " done: " + a.Note, nil
			}, opts...)
	}
	// confirm asks the user before it writes, and writes with the answer.
	// It asks at its gate, so a test can steer or cancel the turn while
	// the question is on its way.
	confirm := agent.MustTool("confirm_write", "Asks before it writes.", agent.EffectNonIdempotentWrite,
		func(ctx context.Context, call agent.ToolContext, a noteArgs) (string, error) {
			if len(call.Answers) == 0 {
				if err := (enginetest.Gate{Dir: dir, Name: "confirm_write"}).Pass(ctx); err != nil {
					return "", err
				}
				return "", agent.AskUser("Write "+a.Note+"?", "yes", "no")
			}
			if err := calls.Append("confirm_write", call.IdempotencyKey, strconv.Itoa(call.Attempt), strconv.Itoa(os.Getpid())); err != nil {
				return "", err
			}
			return "confirm_write " + call.Answers[0].Answer, nil
		}, agent.WithApproval(false))
	// report_task starts a task the session polls; each poll stops at the
	// report_poll gate, and the task is done on its second poll.
	poller := &reportPoller{calls: calls, dir: dir}
	report := agent.MustTool("report_task", "Starts a report task.", agent.EffectIdempotentWrite,
		func(ctx context.Context, call agent.ToolContext, _ noteArgs) (string, error) {
			if call.Checkpoint != "" {
				_ = calls.Append("report_task_resumed", call.Checkpoint, strconv.Itoa(call.Attempt), strconv.Itoa(os.Getpid()))
				return "", agent.StartTask(call.Checkpoint, time.Second)
			}
			if err := calls.Append("report_task", call.IdempotencyKey, strconv.Itoa(call.Attempt), strconv.Itoa(os.Getpid())); err != nil {
				return "", err
			}
			taskID := "job-" + call.ToolCallID
			call.SaveCheckpoint(taskID)
			if err := (enginetest.Gate{Dir: dir, Name: "report_task"}).Pass(ctx); err != nil {
				return "", err
			}
			return "", agent.StartTask(taskID, time.Second)
		}, agent.WithApproval(false), agent.WithTaskPoller(poller))
	// screenshot returns a PNG it uploads to the agent's media store.
	screenshot := agent.MustTool("screenshot", "Takes a screenshot.", agent.EffectRead,
		func(ctx context.Context, call agent.ToolContext, _ noteArgs) (agent.ToolOutput, error) {
			if call.MediaStore == nil {
				return agent.ToolOutput{Output: "no media store"}, nil
			}
			ref, err := call.MediaStore.PutImage(ctx, mediatest.PNG(8, 8, byte(len(call.ToolCallID))))
			if err != nil {
				return agent.ToolOutput{}, err
			}
			return agent.ToolOutput{Output: "took [image 1]", Images: []agent.ImageReference{ref}}, nil
		})
	tools := []agent.Tool{
		confirm, report, screenshot,
		gated("read_a", agent.EffectRead),
		gated("read_b", agent.EffectRead),
		gated("write_once", agent.EffectNonIdempotentWrite, agent.WithApproval(false)),
		gated("write_approved", agent.EffectNonIdempotentWrite),
	}
	script := func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		texts := agent.UserTexts(req)
		last := texts[len(texts)-1]
		_ = models.Append(last, strconv.Itoa(len(req.Input)), strconv.Itoa(os.Getpid()))
		if strings.Contains(last, "gate-model") {
			if err := (enginetest.Gate{Dir: dir, Name: "model"}).Pass(context.Background()); err != nil {
				return agent.ScriptedReply{}, err
			}
		}
		if results := agent.ToolResults(req); len(results) > 0 {
			parts := make([]string, 0, len(results))
			for _, r := range results {
				parts = append(parts, r.ToolName+"="+r.Output)
			}
			return agent.ScriptedReply{Text: "results: " + strings.Join(parts, "; ")}, nil
		}
		// "plan: a; b" writes a plan of pending tasks; the message that
		// executes an approved plan completes every task.
		if _, tasks, ok := strings.Cut(last, "plan: "); ok && !strings.Contains(last, "approved plan revision") {
			return writeTodos(strings.Split(tasks, ";"), "pending"), nil
		}
		if strings.Contains(last, "approved plan revision") {
			for i := len(texts) - 1; i >= 0; i-- {
				if _, tasks, ok := strings.Cut(texts[i], "plan: "); ok {
					return writeTodos(strings.Split(tasks, ";"), "completed"), nil
				}
			}
		}
		// "stream: <n>" answers n words, streamed one at a time 50 ms apart.
		if _, count, ok := strings.Cut(last, "stream: "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(count))
			var reply agent.ScriptedReply
			for i := range n {
				reply.TextChunks = append(reply.TextChunks, "w"+strconv.Itoa(i+1)+" ")
			}
			reply.Text, reply.ChunkDelay = strings.Join(reply.TextChunks, ""), 50*time.Millisecond
			return reply, nil
		}
		// "ask: <question>" asks the user; "wait: <seconds>" waits durably.
		if _, question, ok := strings.Cut(last, "ask: "); ok {
			return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{ID: "q1", Name: "ask_user",
				Arguments: map[string]any{"question": question, "choices": []string{"red", "blue"}}}}}, nil
		}
		if _, seconds, ok := strings.Cut(last, "wait: "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(seconds))
			return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{ID: "w1", Name: "durable_wait",
				Arguments: map[string]any{"duration_seconds": n, "reason": "test"}}}}, nil
		}
		// A message "tools: a, b" calls the named tools in parallel.
		if _, rest, ok := strings.Cut(last, "tools: "); ok {
			var reply agent.ScriptedReply
			for i, name := range strings.Split(rest, ",") {
				args, _ := json.Marshal(noteArgs{Note: "n" + strconv.Itoa(i+1)})
				reply.ToolCalls = append(reply.ToolCalls, agent.ScriptedToolCall{
					ID: "c" + strconv.Itoa(i+1), Name: strings.TrimSpace(name), Arguments: string(args),
				})
			}
			return reply, nil
		}
		if len(req.Images) > 0 {
			return agent.ScriptedReply{Text: "echo: " + last + " (" + strconv.Itoa(len(req.Images)) + " images)"}, nil
		}
		return agent.ScriptedReply{Text: "echo: " + last}, nil
	}
	worker.Main(worker.Options{Tools: tools, Scripts: map[string]agent.Script{"test": script}})
}

// writeTodos is one write_todos call with every task in one status.
func writeTodos(contents []string, status string) agent.ScriptedReply {
	todos := make([]map[string]string, 0, len(contents))
	for _, c := range contents {
		todos = append(todos, map[string]string{"content": strings.TrimSpace(c), "status": status})
	}
	return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{ID: "p1", Name: "write_todos", Arguments: map[string]any{"todos": todos}}}}
}

type reportPoller struct {
	calls *enginetest.Log
	dir   string
}

func (p *reportPoller) PollTask(ctx context.Context, poll agent.TaskPoll) (string, error) {
	if err := p.calls.Append("report_poll", poll.TaskID, strconv.Itoa(poll.Attempt), strconv.Itoa(os.Getpid())); err != nil {
		return "", err
	}
	if err := (enginetest.Gate{Dir: p.dir, Name: "report_poll"}).Pass(ctx); err != nil {
		return "", err
	}
	polls := 0
	for _, line := range p.calls.Lines() {
		if line[0] == "report_poll" && line[1] == poll.TaskID {
			polls++
		}
	}
	if polls < 2 {
		return "", agent.StillRunning(time.Second, "")
	}
	return "report " + poll.TaskID + " ready", nil
}

func (p *reportPoller) CancelTask(_ context.Context, poll agent.TaskPoll) error {
	return p.calls.Append("report_cancel", poll.TaskID)
}
