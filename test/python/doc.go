// Package python runs a worker and a caller written in Python, with the
// standard library only, from docs/protocol.md ("A worker in another
// language") against a server with the deployed permissions: the proof
// that a program in another language can serve and call tools with what
// the protocol documents and nothing more. The programs are in testdata.
package python
