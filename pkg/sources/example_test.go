package sources_test

import (
	"fmt"

	"github.com/toolbus/toolbus/pkg/sources"
)

func ExampleMethods() {
	methods := sources.Methods("fs", []string{"read_file", "files.read", "search web"})
	for _, name := range []string{"read_file", "files.read", "search web"} {
		fmt.Printf("%q → fs-%s\n", name, methods[name])
	}
	// Output:
	// "read_file" → fs-read_file
	// "files.read" → fs-files_read_601e4e
	// "search web" → fs-search_web_5a0a9c
}
