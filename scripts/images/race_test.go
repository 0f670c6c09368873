//go:build race

package main

// raceDetector: the test is built with the race detector, whose
// instrumentation makes compressing and reading the images' layers take
// minutes rather than seconds.
const raceDetector = true
