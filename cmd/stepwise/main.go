// Command stepwise drives agent sessions from a shell: start a session,
// send a message, approve or reject a tool call, answer a question, show a
// snapshot or the stored messages, and find sessions waiting for a person.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	temporallog "go.temporal.io/sdk/log"

	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

const usage = `Usage: stepwise [flags] <command> [arguments]

Commands:
  start <session> [message]           Start a session; a message starts its first turn.
  send <session> <message>            Send a user message; --image files go to --media-store first.
  approve <session> <interrupt>       Approve a pending tool call.
  reject <session> <interrupt> [why]  Reject a tool call (the model sees why), or decline a question.
  answer <session> <interrupt> <text> Answer a pending question.
  plan <session> <message>            Send a message that starts a planning turn.
  execute-plan <session> <revision>   Approve a plan revision and execute it.
  steer <session> <message>           Steer the running turn with a message (queued when none runs).
  steer-queued <session> <message-id> Steer the running turn with a queued message.
  delete-queued <session> <message-id>
                                      Delete a queued message.
  cancel <session> <turn>             Cancel the running turn now.
  settings <session> <json>           Replace the session settings with a JSON object
                                      ({} clears them); the next turn uses them.
  snapshot <session>                  Print the session's snapshot as JSON.
  messages <session> [before] [limit] Print a page of stored messages as JSON: the newest
                                      (before 0), up to limit (default 50, at most 200).
  waiting [step]                      List the Agent's sessions waiting in a Step
                                      (default: AwaitToolApproval and AwaitQuestionAnswer).

Exit statuses:
  0  the session accepted the request (prints true), or the command succeeded
  1  an error: bad input, no connection, no such session
  2  a bad command line
  3  the session refused the request (prints false)
  4  the request was sent but not answered yet (prints pending): no worker of the
     Flow type ran it in time; it takes effect, or is refused, when one does.
     Run the command again with --request-id <id> (the ID it printed) to learn
     the outcome: a request the session already accepted answers true again
     and changes nothing.

Flags:
`

// defaultPageSize is the page of messages the CLI asks for without a limit.
const defaultPageSize = 50

// Exit statuses of a request; any other error exits with 1.
const (
	// exitFalse is a request the session refused.
	exitFalse = 3
	// exitPending is a request sent but not answered in time, which a
	// worker runs when it polls.
	exitPending = 4
)

func main() {
	os.Exit(stepwise())
}

// stepwise runs the command line and returns the exit status.
func stepwise() int {
	flags := flag.NewFlagSet("stepwise", flag.ExitOnError)
	address := flags.String("address", envOr("STEPWISE_ENGINE_ADDRESS", "localhost:7233"), "Temporal frontend address (STEPWISE_ENGINE_ADDRESS).")
	namespace := flags.String("namespace", envOr("STEPWISE_ENGINE_NAMESPACE", "default"), "Temporal namespace (STEPWISE_ENGINE_NAMESPACE).")
	flowType := flags.String("flow-type", os.Getenv("STEPWISE_FLOW_TYPE"), "The Agent's Flow type (STEPWISE_FLOW_TYPE).")
	agent := flags.String("agent", os.Getenv("STEPWISE_AGENT"),
		"The Agent, as <namespace>/<name> (STEPWISE_AGENT): its sessions are reached under its own names. Without it, the shared sessions\n"+
			"of the Flow type, which workers of engine 0.7.0 and earlier run.")
	taskQueue := flags.String("task-queue", "", "Where new sessions start, as the Agent's status.taskQueue says; default the Agent's own task queue.")
	sharedTaskQueue := flags.String("shared-task-queue", "", "The Agent's status.sharedTaskQueue, while it still serves sessions under the shared names.")
	timeout := flags.Duration("timeout", 30*time.Second, "How long a command may take; a request not answered by then exits with status 4.")
	requestID := flags.String("request-id", "", "Names the request, so that running the command again is the same request and\nlearns its outcome; default: a new random ID, printed when the request is pending.")
	var images imageFlags
	flags.Var((*imageList)(&images.files), "image", "An image file (PNG, JPEG, GIF or WebP) that send uploads and sends; repeat for more.")
	flags.StringVar(&images.store, "media-store", os.Getenv("STEPWISE_MEDIA_STORE"),
		"The Agent's media store, as its MediaStore's status shows it: s3://<bucket>[/<prefix>] or file://<root>\n(STEPWISE_MEDIA_STORE). S3 credentials come from the standard AWS chain.")
	flags.StringVar(&images.s3Endpoint, "s3-endpoint", os.Getenv("STEPWISE_S3_ENDPOINT"), "The S3-compatible service's URL, when not AWS S3 (STEPWISE_S3_ENDPOINT).")
	flags.StringVar(&images.s3Region, "s3-region", os.Getenv("STEPWISE_S3_REGION"), "The bucket's region (STEPWISE_S3_REGION).")
	flags.BoolVar(&images.s3PathStyle, "s3-path-style", os.Getenv("STEPWISE_S3_PATH_STYLE") == "true", "Address the bucket in the URL path, as many S3-compatible services need (STEPWISE_S3_PATH_STYLE=true).")
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), usage)
		flags.PrintDefaults()
	}
	_ = flags.Parse(os.Args[1:])
	if flags.NArg() == 0 {
		flags.Usage()
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{
		HostPort: *address, Namespace: *namespace,
		Logger: temporallog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	})
	if err != nil {
		return fail(fmt.Errorf("connecting to Temporal at %s: %w", *address, err))
	}
	defer c.Close()
	target := sessions.Agent{FlowType: *flowType, TaskQueue: *taskQueue, SharedTaskQueue: *sharedTaskQueue}
	if *agent != "" {
		ns, name, ok := strings.Cut(*agent, "/")
		if !ok || ns == "" || name == "" {
			return fail(fmt.Errorf("--agent %q: want <namespace>/<name>", *agent))
		}
		target.Namespace, target.Name = ns, name
	}
	cfg := config{agent: target, requestID: *requestID, images: images}
	status, err := run(ctx, c, cfg, flags.Args(), os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stepwise:", err)
		if status == 0 {
			status = 1
		}
	}
	return status
}

// config is what the flags say about every command.
type config struct {
	agent sessions.Agent
	// requestID names an RPC; empty gives each a random ID.
	requestID string
	// images are send's images.
	images imageFlags
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "stepwise:", err)
	return 1
}

// run executes one command and returns the exit status; with an error the
// status is 1 unless it says more.
func run(ctx context.Context, c client.Client, cfg config, args []string, out io.Writer) (int, error) {
	command, args := args[0], args[1:]
	if cfg.agent.FlowType == "" {
		return 0, errors.New("--flow-type is required")
	}
	s := sessions.New(c, cfg.agent)
	if command == "waiting" {
		return waiting(ctx, s, args, out)
	}
	id := sessions.WithRequestID(cfg.requestID)
	need := func(n int, names string) error {
		if len(args) < n {
			return fmt.Errorf("%s needs %s", command, names)
		}
		return nil
	}
	var (
		ok  bool
		err error
	)
	switch command {
	case "start":
		if err := need(1, "<session>"); err != nil {
			return 0, err
		}
		ok, err = s.Start(ctx, args[0], strings.Join(args[1:], " "), id)
	case "send":
		if err := need(2, "<session> <message>"); err != nil {
			return 0, err
		}
		refs, uploadErr := uploadImages(ctx, cfg.images)
		if uploadErr != nil {
			return 0, uploadErr
		}
		opts := []sessions.SendOption{id}
		if len(refs) > 0 {
			opts = append(opts, sessions.WithImages(refs...))
		}
		ok, err = s.Send(ctx, args[0], strings.Join(args[1:], " "), opts...)
	case "approve":
		if err := need(2, "<session> <interrupt>"); err != nil {
			return 0, err
		}
		ok, err = s.Approve(ctx, args[0], args[1], id)
	case "reject":
		if err := need(2, "<session> <interrupt>"); err != nil {
			return 0, err
		}
		ok, err = s.Reject(ctx, args[0], args[1], strings.Join(args[2:], " "), id)
	case "answer":
		if err := need(3, "<session> <interrupt> <answer>"); err != nil {
			return 0, err
		}
		ok, err = s.Answer(ctx, args[0], args[1], strings.Join(args[2:], " "), id)
	case "plan":
		if err := need(2, "<session> <message>"); err != nil {
			return 0, err
		}
		ok, err = s.Send(ctx, args[0], strings.Join(args[1:], " "), sessions.InPlanMode(), id)
	case "execute-plan":
		if err := need(2, "<session> <revision>"); err != nil {
			return 0, err
		}
		revision, convErr := strconv.Atoi(args[1])
		if convErr != nil || revision < 1 {
			return 0, fmt.Errorf("revision must be a plan revision number, not %q", args[1])
		}
		ok, err = s.ExecutePlan(ctx, args[0], revision, id)
	case "steer":
		if err := need(2, "<session> <message>"); err != nil {
			return 0, err
		}
		ok, err = s.Steer(ctx, args[0], strings.Join(args[1:], " "), id)
	case "steer-queued":
		if err := need(2, "<session> <message-id>"); err != nil {
			return 0, err
		}
		ok, err = s.SteerQueued(ctx, args[0], args[1], id)
	case "delete-queued":
		if err := need(2, "<session> <message-id>"); err != nil {
			return 0, err
		}
		ok, err = s.DeleteQueued(ctx, args[0], args[1], id)
	case "cancel":
		if err := need(2, "<session> <turn>"); err != nil {
			return 0, err
		}
		ok, err = s.CancelTurn(ctx, args[0], args[1], id)
	case "settings":
		if err := need(2, "<session> <json>"); err != nil {
			return 0, err
		}
		var settings sessions.SessionSettings
		if err := json.Unmarshal([]byte(strings.Join(args[1:], " ")), &settings); err != nil || settings == nil {
			return 0, fmt.Errorf("settings must be a JSON object such as {\"model\":\"large\"}")
		}
		ok, err = s.UpdateSettings(ctx, args[0], settings, id)
	case "snapshot":
		if err := need(1, "<session>"); err != nil {
			return 0, err
		}
		snap, err := s.Snapshot(ctx, args[0])
		if err != nil {
			return 0, err
		}
		return 0, printJSON(out, snap)
	case "messages":
		if err := need(1, "<session>"); err != nil {
			return 0, err
		}
		req := sessions.MessagesRequest{Limit: defaultPageSize}
		if len(args) > 1 {
			if req.BeforeSequence, err = strconv.ParseInt(args[1], 10, 64); err != nil {
				return 0, fmt.Errorf("before must be a message sequence, not %q", args[1])
			}
		}
		if len(args) > 2 {
			if req.Limit, err = strconv.Atoi(args[2]); err != nil {
				return 0, fmt.Errorf("limit must be a number, not %q", args[2])
			}
		}
		page, err := s.Messages(ctx, args[0], req)
		if err != nil {
			return 0, err
		}
		return 0, printJSON(out, page)
	default:
		return 0, fmt.Errorf("unknown command %q; run stepwise -h", command)
	}
	var pending *sessions.PendingError
	if errors.As(err, &pending) {
		fmt.Fprintln(out, "pending")
		return exitPending, fmt.Errorf("%w\nrun the same command with --request-id %s to learn its outcome", err, pending.RequestID)
	}
	if err != nil {
		return 0, err
	}
	fmt.Fprintln(out, ok)
	if !ok {
		return exitFalse, nil
	}
	return 0, nil
}

func waiting(ctx context.Context, s *sessions.Sessions, args []string, out io.Writer) (int, error) {
	steps := args
	if len(steps) == 0 {
		steps = []string{sessions.StepAwaitToolApproval, sessions.StepAwaitQuestionAnswer}
	}
	for _, step := range steps {
		found, _, err := s.Waiting(ctx, sessions.WaitingQuery{Steps: []string{step}})
		if err != nil {
			return 0, err
		}
		for _, w := range found {
			fmt.Fprintf(out, "%s\t%s\t%s\n", step, w.FlowType, w.SessionID)
		}
	}
	return 0, nil
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
