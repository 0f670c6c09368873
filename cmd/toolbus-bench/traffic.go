package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/internal/wire/natsserver"
)

// connTraffic is one client connection's counts as the server keeps them:
// In is what the connection published, Out what the server delivered to it.
type connTraffic struct {
	In, Out           uint64
	InBytes, OutBytes uint64
	Account           string
	Subs              []string
	// SubMsgs is each subscription's count of delivered messages, by subject.
	SubMsgs map[string]uint64
}

// connectionTraffic reads every client connection's counts, or nothing when
// not asked: a read of every connection's subscriptions is not free.
func connectionTraffic(srv *natsserver.Server, asked bool) (map[uint64]connTraffic, error) {
	if !asked {
		return nil, nil
	}
	cz, err := srv.Connz(&server.ConnzOptions{Subscriptions: true, SubscriptionsDetail: true, Limit: 1 << 16})
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]connTraffic, len(cz.Conns)+1)
	// The consumers' deliveries, under cid 0: a pull consumer's fetches
	// come through short-lived subscriptions the connections no longer
	// hold when read.
	jsz, err := srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, Config: true})
	if err != nil {
		return nil, err
	}
	consumers := connTraffic{Account: "consumers", SubMsgs: map[string]uint64{}}
	for _, a := range jsz.AccountDetails {
		for _, st := range a.Streams {
			consumers.SubMsgs["stored in "+st.Name] += st.State.LastSeq
			for _, ci := range st.Consumer {
				name := st.Name + "/" + ci.Name
				if ci.Config != nil {
					name += " " + ci.Config.FilterSubject + strings.Join(ci.Config.FilterSubjects, ",")
					if ci.Config.HeadersOnly {
						name += " (headers only)"
					}
				}
				consumers.SubMsgs[name] += ci.Delivered.Consumer
				consumers.Out += ci.Delivered.Consumer
			}
		}
	}
	out[0] = consumers
	for _, c := range cz.Conns {
		t := connTraffic{In: uint64(c.InMsgs), Out: uint64(c.OutMsgs), InBytes: uint64(c.InBytes), OutBytes: uint64(c.OutBytes), Account: c.Account, SubMsgs: map[string]uint64{}}
		for _, sd := range c.SubsDetail {
			t.Subs = append(t.Subs, sd.Subject)
			t.SubMsgs[sd.Subject] += uint64(sd.Msgs)
		}
		out[c.Cid] = t
	}
	return out, nil
}

func trafficSince(before, after map[uint64]connTraffic) map[uint64]connTraffic {
	if after == nil {
		return nil
	}
	d := make(map[uint64]connTraffic, len(after))
	for cid, a := range after {
		b := before[cid]
		a.In -= b.In
		a.Out -= b.Out
		a.InBytes -= b.InBytes
		a.OutBytes -= b.OutBytes
		subs := make(map[string]uint64, len(a.SubMsgs))
		for k, v := range a.SubMsgs {
			subs[k] = v - b.SubMsgs[k]
		}
		a.SubMsgs = subs
		d[cid] = a
	}
	return d
}

// printConnectionTraffic prints each connection's messages per call, the
// idle window's taken off, busiest first.
func printConnectionTraffic(busy, idle map[uint64]connTraffic, calls int) {
	type row struct {
		cid               uint64
		in, out           float64
		inBytes, outBytes float64
		c                 connTraffic
	}
	var rows []row
	for cid, c := range busy {
		i := idle[cid]
		in := (float64(c.In) - float64(i.In)) / float64(calls)
		out := (float64(c.Out) - float64(i.Out)) / float64(calls)
		if in < 0.005 && out < 0.005 {
			continue
		}
		inBytes := (float64(c.InBytes) - float64(i.InBytes)) / float64(calls)
		outBytes := (float64(c.OutBytes) - float64(i.OutBytes)) / float64(calls)
		rows = append(rows, row{cid, in, out, inBytes, outBytes, c})
	}
	slices.SortFunc(rows, func(a, b row) int {
		switch {
		case a.in+a.out > b.in+b.out:
			return -1
		case a.in+a.out < b.in+b.out:
			return 1
		}
		return 0
	})
	fmt.Fprintln(os.Stderr, "per call, by connection (in = published by it, out = delivered to it; messages, then bytes):")
	for _, r := range rows {
		subs := slices.Clone(r.c.Subs)
		slices.Sort(subs)
		if len(subs) > 6 {
			subs = append(subs[:6], fmt.Sprintf("… %d more", len(r.c.Subs)-6))
		}
		fmt.Fprintf(os.Stderr, "  cid %-4d %-10s in %5.2f (%6.0f B) out %5.2f (%6.0f B)  subs %s\n", r.cid, r.c.Account, r.in, r.inBytes, r.out, r.outBytes, strings.Join(subs, " "))
		for subject, n := range r.c.SubMsgs {
			per := (float64(n) - float64(idle[r.cid].SubMsgs[subject])) / float64(calls)
			if per >= 0.005 {
				fmt.Fprintf(os.Stderr, "      %5.2f  %s\n", per, subject)
			}
		}
	}
}
