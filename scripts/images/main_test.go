package main

import (
	"testing"

	"github.com/toolbus/toolbus/internal/testenv/leaks"
)

func TestMain(m *testing.M) { leaks.Main(m) }
