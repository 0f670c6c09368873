// Package reuse runs short functions on goroutines that outlive them.
//
// A new goroutine starts on a small stack and grows it by copying as the
// call path deepens; on the call path, where every request and every call
// used to get a fresh goroutine, that copying was a few percent of all CPU.
// A goroutine of a Pool takes the next function when it finishes one, so
// its stack is grown once. Go never blocks: with no idle goroutine it
// starts another, so a slow function never holds up the ones behind it.
package reuse

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs functions on reused goroutines. The zero value is not usable; use New.
type Pool struct {
	work      chan func()
	idle      time.Duration
	live      atomic.Int64
	closed    chan struct{}
	closeOnce sync.Once
}

// New returns a pool whose goroutines end after idle time without work.
func New(idle time.Duration) *Pool {
	return &Pool{work: make(chan func()), idle: idle, closed: make(chan struct{})}
}

// Go runs f on an idle goroutine of the pool, or on a new one.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.live.Add(1)
		go p.run(f)
	}
}

// Close ends the pool's idle goroutines at once, and each busy one when its
// function returns, rather than after the idle time. Functions given to Go
// after Close still run, each on a goroutine of its own that ends with it.
func (p *Pool) Close() {
	p.closeOnce.Do(func() { close(p.closed) })
}

// Live returns how many goroutines the pool has, busy or idle.
func (p *Pool) Live() int { return int(p.live.Load()) }

func (p *Pool) run(f func()) {
	defer p.live.Add(-1)
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	for {
		f()
		f = nil // the finished function's captures are not kept alive while idle
		idle.Reset(p.idle)
		select {
		case f = <-p.work:
		case <-idle.C:
			return
		case <-p.closed:
			return
		}
	}
}
