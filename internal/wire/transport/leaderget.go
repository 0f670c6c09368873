package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// GetLastFromLeader reads the last message on subject from the stream's
// leader, through the stream's message-get API rather than a direct get.
//
// Direct gets are answered by any replica, and a replica may not yet hold
// a message the leader has acknowledged: a write is acknowledged once a
// quorum stored it, and a restarted replica serves direct gets while it
// still catches up. So a direct get that finds nothing proves nothing in a
// cluster; when the absence of a message decides something (a call that
// does not exist, a call without a result that is about to run again),
// confirm it here. It returns ErrNotFound when the leader has no message on
// subject, and follows the stream's retry policy.
func (s *Stream) GetLastFromLeader(ctx context.Context, subject string) (msg *nats.Msg, seq uint64, err error) {
	ctx, cancel := withDefaultDeadline(ctx, DefaultReadTimeout)
	defer cancel()
	body, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, 0, err
	}
	err = Retry(ctx, s.policy, func(ctx context.Context) error {
		msg, seq, err = s.getFromLeader(ctx, body)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read last message on %s from the stream's leader: %w", subject, err)
	}
	return msg, seq, nil
}

// leaderGetReply is the message-get API's answer.
type leaderGetReply struct {
	Message *struct {
		Subject string `json:"subject"`
		Seq     uint64 `json:"seq"`
		Header  []byte `json:"hdrs"`
		Data    []byte `json:"data"`
	} `json:"message"`
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// Error codes of the message-get API: a subject without messages, and a
// request from an account without JetStream.
const (
	noMessageFound                = 10037
	jetStreamNotEnabledForAccount = 10039
)

func (s *Stream) getFromLeader(ctx context.Context, body []byte) (*nats.Msg, uint64, error) {
	reply, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+s.name, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			err = ErrNoResponders
		}
		return nil, 0, err
	}
	var r leaderGetReply
	if err := json.Unmarshal(reply.Data, &r); err != nil {
		return nil, 0, fmt.Errorf("unreadable message-get reply: %w", err)
	}
	switch {
	case r.Error != nil && (r.Error.ErrCode == noMessageFound || r.Error.Code == 404):
		return nil, 0, ErrNotFound
	case r.Error != nil && r.Error.ErrCode == jetStreamNotEnabledForAccount:
		// A client of another account reads the stream through an import
		// of its direct gets and cannot ask the leader: the direct get's
		// answer stands.
		return nil, 0, ErrNotFound
	case r.Error != nil:
		return nil, 0, &StatusError{Status: strconv.Itoa(r.Error.Code), Description: r.Error.Description}
	case r.Message == nil:
		return nil, 0, errors.New("message-get reply without a message")
	}
	msg := &nats.Msg{Subject: r.Message.Subject, Data: r.Message.Data}
	if len(r.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(r.Message.Header)
		if err != nil {
			return nil, 0, fmt.Errorf("unreadable headers of message %d: %w", r.Message.Seq, err)
		}
		msg.Header = h
	}
	return msg, r.Message.Seq, nil
}
