package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolbus/toolbus/pkg/messages"
)

// unavailable codes an error of JetStream or the ledger before it reaches
// a client: an error that has a code (other than internal) keeps it, a deadline that passed is
// timeout, and anything else is unavailable, prefixed by what failed.
func unavailable(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if messages.CodeOf(err) != messages.CodeInternal {
		return err
	}
	code := messages.CodeUnavailable
	if errors.Is(err, context.DeadlineExceeded) {
		code = messages.CodeTimeout
	}
	return messages.Errorf(code, "%s: %v", fmt.Sprintf(format, args...), err)
}
