package search_test

import (
	"fmt"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

func Example() {
	ix, err := search.Build(search.Config{}, []messages.ToolDefinition{
		{Namespace: "weather", Method: "get_forecast", Description: "Weather forecast for a city for the coming days."},
		{Namespace: "github", Method: "createIssue", Description: "Open an issue in a repository."},
		{Namespace: "files", Method: "read_file", Description: "Read a file from the workspace."},
	})
	if err != nil {
		panic(err)
	}

	res, err := ix.Search(search.Query{Text: "will it rain in Lisbon in the next days?"})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Hits[0].Tool)

	// A tool's name, in any spelling, ranks it first.
	res, _ = ix.Search(search.Query{Text: "github:createIssue"})
	fmt.Println(res.Hits[0].Tool, res.Hits[0].Exact)

	// Filters narrow the search to what the agent may see.
	res, _ = ix.Search(search.Query{
		Text:  "read a file",
		Allow: func(n messages.ToolName) bool { return n.Namespace != "files" },
	})
	fmt.Println(len(res.Hits))

	// The encoded index answers the same.
	decoded, _ := search.Decode(ix.Encode())
	res, _ = decoded.Search(search.Query{Text: "open a repository issue"})
	fmt.Println(res.Hits[0].Tool)
	// Output:
	// weather-get_forecast
	// github-createIssue true
	// 0
	// github-createIssue
}
