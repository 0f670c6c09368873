// Package openapi serves the operations of an HTTP API, described by an
// OpenAPI 3.0 or 3.1 document or a Swagger 2.0 one, as Toolbus tools.
//
// A [Source] is a worker.Source: plug it into worker.Namespace.Sources.
//
//	src, err := openapi.New(openapi.Config{
//		Name:      "petstore",
//		Namespace: "pets",
//		Spec:      "specs/petstore.yaml", // or an http(s) URL
//		BaseURL:   "https://petstore.internal/v1",
//		Auth:      openapi.Auth{BearerEnv: "PETSTORE_TOKEN"},
//	})
//
// Start loads the document, resolves every $ref (local, or in other files or
// URLs next to it) and validates it; a document that does not load or
// validate fails Start with the loader's message, which names the broken
// reference or field. Loading is bounded by Config.LoadTimeout (30s) and
// Config.MaxSpecSize (32 MiB, counting every file and URL read), and an
// input schema by 10,000 subschemas once its references are inlined: an
// operation whose input schema exceeds that is not served, with a warning
// in Config.Logger naming it, and the others are.
//
// # Tools
//
// Every operation becomes a tool. Its original name is the operationId, or
// for an operation without one the method and path in lower case with the
// path's punctuation replaced ("get_pets_petId"; "GET /pets/{petId}" when
// that is not unique); [sources.Methods] turns it into a method. The
// description is the summary and the description. GET and HEAD operations
// are tagged read_only, DELETE destructive, every operation network. POST,
// PATCH and DELETE operations are at most once (messages.Delivery): a call
// whose worker died while the request was out is not sent again; the
// others, idempotent by HTTP's definition, are at least once.
//
// The input schema is one object holding the path, query, header and cookie
// parameters and the JSON request body, $refs inlined. The properties of an
// object body sit beside the parameters; any other body (an array, a
// composed schema, a text body) is the property "body". When two of these
// share a name, the first in the order path, query, header, cookie, body
// keeps it and the later one is prefixed with where it goes — the body's
// "id" beside a path parameter "id" becomes "body_id", a query parameter
// "id" becomes "query_id" — and its description says so in a sentence of
// its own. Properties keep the order in which the document declares them
// (parameters first), as a model reads them in order.
//
// # Calls
//
// Path parameters are substituted into the path template, URL-escaped, in
// the simple, label or matrix style; query parameters follow their style
// (form, spaceDelimited, pipeDelimited, deepObject) and explode setting;
// headers use the simple style and cookies the form style. A JSON null
// given for a body property (or a whole JSON body) is sent as null; a null
// parameter is left out. Parameters
// described by a media type rather than a schema are sent as JSON. The
// request ends with the call's context.
//
// A 2xx JSON response becomes a json content block and the structured
// content; a text response a text block; an image or audio response an
// image or audio block; anything else an embedded resource holding the
// bytes. A response outside 2xx is a tool error (is_error) whose text
// carries the status and the body, with {"status": ..., "body": ...} as
// structured content. A request that could not be sent because the server
// could not be reached is handed back with worker.Retry; a connection that
// fails once the request may have reached the server is a tool error, as
// the operation may not be safe to repeat.
//
// # Authentication
//
// Credentials come from environment variables named in [Auth], read when
// the source starts: a bearer token, or an API key sent in a header or a
// query parameter. Config.Headers are sent with every request; the worker
// configuration file lets their values come from the environment or a file
// (see [github.com/toolbus/toolbus/pkg/sources.ExpandValue]).
package openapi
