package engine

import (
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
	"github.com/stepwise-run/stepwise/internal/session"
)

// A tool result's images are held to what a session stores before the
// Step's result is recorded: an invalid one fails the attempt, which the
// call's effect may retry, and outcomes other than success keep none.
func TestToolResultImagesAreCheckedBeforeTheyAreRecorded(t *testing.T) {
	ref, err := media.BuildReference(mediatest.PNG(2, 2, 1), "s3://media")
	if err != nil {
		t.Fatal(err)
	}
	good := session.ImageReference(ref)
	bad := good
	bad.SizeBytes = 0
	many := make([]session.ImageReference, media.MaxImagesPerMessage+1)
	for i := range many {
		many[i] = good
	}

	out, err := checkResultImages("shot", session.ToolOutcome{Kind: session.ToolResultSucceeded, Output: "x", Images: []session.ImageReference{good}})
	if err != nil || len(out.Images) != 1 {
		t.Errorf("a valid image: %+v, %v", out, err)
	}
	for name, images := range map[string][]session.ImageReference{"invalid": {bad}, "21 images": many} {
		_, err := checkResultImages("shot", session.ToolOutcome{Kind: session.ToolResultSucceeded, Images: images})
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != invalidImageType || app.NonRetryable() || !strings.Contains(err.Error(), "the result of shot") {
			t.Errorf("%s: %v; want a retryable %s failure", name, err, invalidImageType)
		}
	}
	out, err = checkResultImages("shot", session.ToolOutcome{Kind: session.ToolResultFailed, Error: "no", Images: []session.ImageReference{bad}})
	if err != nil || out.Images != nil {
		t.Errorf("a failed outcome: %+v, %v; want it recorded without images", out, err)
	}
}
