package reuse

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestGoroutinesAreReused(t *testing.T) {
	p := New(time.Minute)
	done := make(chan struct{})
	for range 100 {
		p.Go(func() { done <- struct{}{} })
		<-done
	}
	// The goroutine that sent may not be idle yet when the next Go comes,
	// so a second one can start; without reuse there would be 100.
	if n := p.Live(); n > 2 {
		t.Fatalf("%d goroutines ran 100 functions one after another; want at most 2", n)
	}
}

func TestSlowFunctionDoesNotHoldUpOthers(t *testing.T) {
	p := New(time.Minute)
	release := make(chan struct{})
	defer close(release)
	p.Go(func() { <-release })
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
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
	deadline := time.Now().Add(10 * time.Second)
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
	goleak.VerifyNone(t, others)
	if n := p.Live(); n != 0 {
		t.Fatalf("%d goroutines live after Close", n)
	}
}
