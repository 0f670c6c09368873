// Package workerconfig reads the YAML file that tells a worker which
// namespaces to serve and where their tools come from. docs/workers.md is
// the file's reference for users; in short:
//
//	namespaces:
//	  - name: everything
//	    slots: 8              # calls this worker runs at once (default 16)
//	    max_attempts: 3       # deliveries before a call fails (default 3)
//	    max_concurrency: 64   # calls in progress across all workers (default 1024)
//	    sources:
//	      - demo: true        # the demo Go tools
//	      - mcp:
//	          name: everything
//	          command: node_modules/.bin/mcp-server-everything
//	          args: [stdio]
//	          env: {LOG_LEVEL: debug}
//	          inherit_env: [GITHUB_TOKEN]  # passed on from the worker's environment
//	          roots: [project]             # directories offered as MCP roots
//	      - mcp:
//	          name: remote
//	          transport: http  # stdio (default with command), sse, or http (default with url)
//	          url: https://mcp.example.com/mcp
//	          headers:
//	            X-Team: tools
//	            Authorization: "Bearer ${REMOTE_TOKEN}"  # from the environment
//	            X-Api-Key: "file:secrets/remote-key"     # from a file
//	      - openapi:
//	          name: petstore
//	          spec: specs/petstore.yaml   # a file or an http(s) URL
//	          base_url: https://petstore.example.com/v1
//	          auth: {bearer_env: PETSTORE_TOKEN}
//	          headers: {X-Tenant: "${TENANT}"}
//	          delivery: at_least_once      # every operation's delivery guarantee
//	          tools:                       # one tool's, by its source name or method
//	            deletePet: {delivery: at_most_once}
//	          # or: auth: {api_key_env: PETSTORE_KEY, header: X-API-Key}
//	          # or: auth: {api_key_env: PETSTORE_KEY, query: api_key}
//
// Each source is exactly one of demo, mcp and openapi. An MCP server's
// optional fields are dir (working directory), env, inherit_env, headers,
// roots;
// a stdio server's environment is HOME, LOGNAME, PATH, SHELL, TERM and USER,
// the variables inherit_env names, and env — never the rest of the worker's; an OpenAPI
// service's are base_url, auth and headers. Relative paths — a command or dir that
// holds a '/', an OpenAPI spec file — are relative to the directory of the
// configuration file; a bare command is looked up in PATH. Credentials stay
// in the environment or in files: auth names variables, and a header's
// value may hold ${NAME}, replaced by the environment variable NAME, or be
// "file:<path>", the content of the file (relative to the configuration)
// without its trailing newline. They are read when the worker starts; an
// unset variable or an unreadable file stops it with an error naming the
// file, the namespace, the source and the header.
//
// An mcp or openapi source may set delivery, at_least_once or at_most_once,
// for all its tools, and tools.<name>.delivery for one of them, named as
// the source names it or by its method; the tool's own wins, and either
// wins over what the source says (an MCP server's hints, a destructive
// tag). See messages.Delivery.
//
// Decoding is strict: an unknown field is an error. Every problem is a
// *Error naming the file, the line where known, and the field, as in
// "worker.yaml:9: namespaces[0].sources[1].mcp.url: the http transport needs a url".
// The connection settings (NATS server, prefix, worker ID, ack wait) are
// flags of cmd/worker, not part of the file.
package workerconfig
