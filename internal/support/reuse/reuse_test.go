package reuse

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
)

func TestGoroutinesAreReused(t *testing.T) {
	p := New(time.Minute)
	defer p.Close()
	done := make(chan struct{})
	for range 100 {
		p.Go(func() { done <- struct{}{} })
		<-done
	}
	// The goroutine that sent may not be idle yet when the next Go comes,
	// so another one can start, a few on a busy machine; without reuse
	// there would be 100.
	if n := p.Live(); n > 10 {
		t.Fatalf("%d goroutines ran 100 functions one after another; want a few", n)
	}
}

func TestSlowFunctionDoesNotHoldUpOthers(t *testing.T) {
	p := New(time.Minute)
	release := make(chan struct{})
	defer close(release)
	defer p.Close()
	p.Go(func() { <-release })
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(time.Minute):
		t.Fatal("a function waited behind a blocked one")
	}
}

func TestIdleGoroutinesEnd(t *testing.T) {
	p := New(time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		p.Go(wg.Done)
	}
	wg.Wait()
	deadline := time.Now().Add(time.Minute)
	for p.Live() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still live long after their idle time", p.Live())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCloseEndsGoroutinesWithoutWaitingForIdleTime(t *testing.T) {
	others := goleak.IgnoreCurrent()
	p := New(time.Hour)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		p.Go(wg.Done)
	}
	wg.Wait()
	p.Close()
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	<-ran
	// Each ends once it is scheduled, within the minute on a busy
	// machine, not after its hour of idle time.
	for deadline := time.Now().Add(time.Minute); p.Live() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines live a minute after Close", p.Live())
		}
	}
	leaks.VerifyNone(t, others)
}
