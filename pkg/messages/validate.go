package messages

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Ranges of the integer fields of requests, and lengths of their free
// text. A request outside them is refused with CodeBadRequest; see each
// request's Validate.
const (
	// MaxTimeoutMS bounds SubmitRequest.TimeoutMS and WaitMS: seven days,
	// in milliseconds. Larger values would overflow a deadline.
	MaxTimeoutMS = 7 * 24 * 60 * 60 * 1000
	// MaxDiscoverPageSize bounds DiscoverRequest.PageSize.
	MaxDiscoverPageSize = 100
	// MaxDiscoverPage bounds DiscoverRequest.Page.
	MaxDiscoverPage = 1 << 20
	// MaxLabelLength bounds a label: who decided or cancelled (by), a tag.
	MaxLabelLength = 128
	// MaxReasonLength bounds a reason given for a cancel, a decision or a switch.
	MaxReasonLength = 1024
	// MaxQueryLength bounds a discovery query.
	MaxQueryLength = 1024
	// MaxIdempotencyKeyLength bounds SubmitRequest.IdempotencyKey.
	MaxIdempotencyKeyLength = 256
)

// ValidateLabel reports whether s can be a label that names a person or
// a tag: valid UTF-8 without control characters, 1 to MaxLabelLength
// bytes. Labels are stored, never put in a subject or key. kind names the
// field in the error.
func ValidateLabel(kind, s string) error {
	if s == "" || len(s) > MaxLabelLength || !utf8.ValidString(s) {
		return &NameError{Kind: kind, Value: s, Reason: fmt.Sprintf("must be 1 to %d bytes of UTF-8", MaxLabelLength)}
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return &NameError{Kind: kind, Value: s, Reason: "must not hold control characters"}
		}
	}
	return nil
}

// validateText checks free text: valid UTF-8 of at most max bytes.
func validateText(field, s string, max int) error {
	if len(s) > max {
		return Errorf(CodeBadRequest, "%s is %d bytes; at most %d", field, len(s), max)
	}
	if !utf8.ValidString(s) {
		return Errorf(CodeBadRequest, "%s is not UTF-8", field)
	}
	return nil
}

// validateRange checks an integer field against its documented range.
func validateRange(field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return Errorf(CodeBadRequest, "%s is %d; it must be between %d and %d", field, v, lo, hi)
	}
	return nil
}

// optionalID checks an ID that may be absent.
func optionalID(kind, id string) error {
	if id == "" {
		return nil
	}
	return ValidateID(kind, id)
}

// requiredID checks an ID that must be given.
func requiredID(field, kind, id string) error {
	if id == "" {
		return Errorf(CodeBadRequest, "%s is required", field)
	}
	return ValidateID(kind, id)
}

func optionalLabel(kind, s string) error {
	if s == "" {
		return nil
	}
	return ValidateLabel(kind, s)
}

func toolNames(names []string) error {
	for _, n := range names {
		if _, err := ParseToolName(n); err != nil {
			return err
		}
	}
	return nil
}

// firstError returns the first non-nil error.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Validate checks the request on its own: the tool's name, the IDs it
// carries, the options that exclude or need each other, and the ranges of
// timeout_ms (0, the default, to MaxTimeoutMS) and wait_ms (0 to
// MaxTimeoutMS; the coordinator waits at most its own maximum).
func (r *SubmitRequest) Validate() error {
	_, err := r.ValidateTool()
	return err
}

// ValidateTool is Validate that also returns the tool's name as it read
// it, for a caller that goes on with the name (the name is read once).
func (r *SubmitRequest) ValidateTool() (ToolName, error) {
	if r.Tool == "" {
		return ToolName{}, Errorf(CodeBadRequest, "tool is required")
	}
	name, err := ParseToolName(r.Tool)
	if err != nil {
		return ToolName{}, err
	}
	return name, r.validateRest()
}

func (r *SubmitRequest) validateRest() error {
	if err := firstError(
		optionalID("agent", r.Agent),
		optionalID("turn", r.Turn),
		validateText("idempotency_key", r.IdempotencyKey, MaxIdempotencyKeyLength),
		validateRange("timeout_ms", r.TimeoutMS, 0, MaxTimeoutMS),
		validateRange("wait_ms", r.WaitMS, 0, MaxTimeoutMS),
	); err != nil {
		return err
	}
	if r.Notify != "" {
		if err := ValidateNotify(r.Notify); err != nil {
			return err
		}
	}
	if r.Route != "" {
		if err := ValidateRoute(r.Route); err != nil {
			return err
		}
		if r.IdempotencyKey != "" {
			return Errorf(CodeBadRequest, "route and idempotency_key exclude each other: an idempotent call's ID comes from its key; use notify for its result")
		}
	}
	if r.CallID != "" {
		if r.Route == "" {
			return Errorf(CodeBadRequest, "call_id needs a route: a caller names the ID only of a call on its route")
		}
		if err := ValidateRoutedCallID(r.Route, r.CallID); err != nil {
			return err
		}
	}
	if r.Quiet {
		if r.CallID == "" {
			return Errorf(CodeBadRequest, "quiet needs call_id: without a reply the caller learns the call's ID from nowhere else")
		}
		if r.Wait {
			return Errorf(CodeBadRequest, "quiet and wait exclude each other")
		}
	}
	return nil
}

// Validate checks the names the request carries. The format is checked
// by the coordinator, which knows the formats.
func (r *ListToolsRequest) Validate() error {
	if r.Namespace != "" {
		if err := ValidateNamespace(r.Namespace); err != nil {
			return err
		}
	}
	if err := firstError(optionalID("agent", r.Agent), optionalID("turn", r.Turn), toolNames(r.Chosen)); err != nil {
		return err
	}
	if r.Intake != nil {
		for _, name := range r.Intake.Tools {
			if strings.ContainsAny(name, "*?[") {
				return &NameError{Kind: "tool name in intake.tools", Value: name, Reason: "intake.tools names tools exactly and takes no pattern; select a bundle in intake.bundles, or name each tool"}
			}
		}
		if err := toolNames(r.Intake.Tools); err != nil {
			return err
		}
		for _, b := range r.Intake.Bundles {
			if err := ValidateID("bundle ID", b); err != nil {
				return err
			}
		}
	}
	return nil
}

// Validate checks that the request names a turn and tools, and every name.
func (r *ActivateRequest) Validate() error {
	if err := firstError(optionalID("agent", r.Agent), requiredID("turn", "turn", r.Turn)); err != nil {
		return err
	}
	if len(r.Tools) == 0 {
		return Errorf(CodeBadRequest, "tools is required")
	}
	return toolNames(r.Tools)
}

// Validate checks the call ID and the range of wait_ms (0 to MaxTimeoutMS).
func (r *GetCallRequest) Validate() error {
	return firstError(requiredID("call_id", "call ID", r.CallID), validateRange("wait_ms", r.WaitMS, 0, MaxTimeoutMS))
}

// Validate checks the call ID, who cancels and the reason's length.
func (r *CancelRequest) Validate() error {
	return firstError(
		requiredID("call_id", "call ID", r.CallID),
		optionalLabel("by", r.By),
		validateText("reason", r.Reason, MaxReasonLength),
	)
}

// Validate checks the turn.
func (r *GetTurnRequest) Validate() error { return requiredID("turn", "turn", r.Turn) }

// Validate checks the names, the query's length, page (0 to
// MaxDiscoverPage) and page_size (0, the default, to MaxDiscoverPageSize).
func (r *DiscoverRequest) Validate() error {
	if err := firstError(
		validateText("query", r.Query, MaxQueryLength),
		optionalID("agent", r.Agent),
		optionalID("turn", r.Turn),
		validateRange("page", int64(r.Page), 0, MaxDiscoverPage),
		validateRange("page_size", int64(r.PageSize), 0, MaxDiscoverPageSize),
	); err != nil {
		return err
	}
	for _, ns := range r.Namespaces {
		if err := ValidateNamespace(ns); err != nil {
			return err
		}
	}
	for _, tag := range r.Tags {
		if err := ValidateLabel("tag", tag); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks the state (empty, "all" or an approval state) and the names.
func (r *ListApprovalsRequest) Validate() error {
	switch r.State {
	case "", "all", ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired, ApprovalWithdrawn:
	default:
		return Errorf(CodeBadRequest, "state must be empty, %q, %q, %q, %q, %q or %q", "all", ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired, ApprovalWithdrawn)
	}
	return firstError(optionalID("agent", r.Agent), optionalID("turn", r.Turn))
}

// Validate checks the approval ID, the decision, how long it counts, who
// decided (required) and the reason's length.
func (r *DecideRequest) Validate() error {
	if err := requiredID("approval_id", "approval ID", r.ApprovalID); err != nil {
		return err
	}
	if r.Decision != DecisionApprove && r.Decision != DecisionDeny {
		return Errorf(CodeBadRequest, "decision must be %q or %q", DecisionApprove, DecisionDeny)
	}
	if r.By == "" {
		return Errorf(CodeBadRequest, "by is required: say who decides")
	}
	switch r.Remember {
	case "", RememberCall, RememberTurn, RememberAgentTool:
	default:
		return Errorf(CodeBadRequest, "remember must be %q, %q or %q", RememberCall, RememberTurn, RememberAgentTool)
	}
	return firstError(ValidateLabel("by", r.By), validateText("reason", r.Reason, MaxReasonLength))
}

// Validate checks that exactly one of tool and namespace is named, and
// who switches and why.
func (r *ToolSwitchRequest) Validate() error {
	if (r.Tool == "") == (r.Namespace == "") {
		return Errorf(CodeBadRequest, "name either a tool or a namespace")
	}
	if r.Tool != "" {
		if _, err := ParseToolName(r.Tool); err != nil {
			return err
		}
	} else if err := ValidateNamespace(r.Namespace); err != nil {
		return err
	}
	return firstError(optionalLabel("by", r.By), validateText("reason", r.Reason, MaxReasonLength))
}
