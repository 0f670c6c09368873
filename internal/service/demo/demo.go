// Package demo is the "demo" namespace: a few small real tools that the
// all-in-one mode serves, so that a first run has something to call.
package demo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// Name is the demo namespace.
const Name = "demo"

// EchoArgs are the arguments of demo-echo.
type EchoArgs struct {
	Text string `json:"text" jsonschema:"description=Text to return unchanged"`
}

// WordCountArgs are the arguments of demo-word_count.
type WordCountArgs struct {
	Text string `json:"text" jsonschema:"description=Text whose words\\, lines and characters are counted"`
}

// WordCount is the result of demo-word_count.
type WordCount struct {
	Words      int `json:"words"`
	Lines      int `json:"lines"`
	Characters int `json:"characters"`
}

// SHA256Args are the arguments of demo-sha256.
type SHA256Args struct {
	Text string `json:"text" jsonschema:"description=Text to hash (its UTF-8 bytes)"`
}

// SleepArgs are the arguments of demo-sleep.
type SleepArgs struct {
	Seconds float64 `json:"seconds" jsonschema:"description=How long to sleep,minimum=0,maximum=3600"`
}

// Tools returns the demo tools.
func Tools() []worker.Tool {
	return []worker.Tool{
		worker.Func("echo", "Returns the given text unchanged.", func(ctx context.Context, in EchoArgs) (string, error) {
			return in.Text, nil
		}, worker.WithTags(messages.TagReadOnly), worker.ConcurrencySafe()),
		worker.Func("word_count", "Counts the words, lines and characters of a text.", func(ctx context.Context, in WordCountArgs) (WordCount, error) {
			wc := WordCount{Words: len(strings.FieldsFunc(in.Text, unicode.IsSpace)), Characters: len([]rune(in.Text))}
			if in.Text != "" {
				wc.Lines = strings.Count(in.Text, "\n") + 1
			}
			return wc, nil
		}, worker.WithTags(messages.TagReadOnly), worker.ConcurrencySafe(), worker.WithSearchHint("statistics length count words")),
		worker.Func("sha256", "Computes the SHA-256 digest of a text, in hexadecimal.", func(ctx context.Context, in SHA256Args) (string, error) {
			sum := sha256.Sum256([]byte(in.Text))
			return hex.EncodeToString(sum[:]), nil
		}, worker.WithTags(messages.TagReadOnly), worker.ConcurrencySafe(), worker.WithSearchHint("hash digest checksum")),
		worker.Func("sleep", "Sleeps for the given number of seconds, reporting progress every tenth of the way. Honours cancellation.", Sleep,
			worker.WithTags(messages.TagSlow), worker.WithSearchHint("wait delay pause")),
	}
}

// Sleep is demo-sleep: it waits, reporting progress in ten steps, and stops
// early when its call is cancelled or times out.
func Sleep(ctx context.Context, in SleepArgs) (string, error) {
	total := time.Duration(in.Seconds * float64(time.Second))
	const steps = 10
	worker.ReportProgress(ctx, 0, steps, "sleeping")
	t := time.NewTimer(total / steps)
	defer t.Stop()
	for i := 1; i <= steps; i++ {
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case <-t.C:
		}
		worker.ReportProgress(ctx, float64(i), steps, fmt.Sprintf("slept %v of %v", total*time.Duration(i)/steps, total))
		t.Reset(total / steps)
	}
	return fmt.Sprintf("slept %v", total), nil
}
