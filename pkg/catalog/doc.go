// Package catalog keeps the tool catalog in a JetStream KV bucket: tool
// definitions under "tools.<namespace>.<method>", worker heartbeats under
// "workers.<namespace>.<worker>", and operator switches under
// "disabled.<namespace>" and "disabled.<namespace>.<method>". Values are JSON,
// so any NATS client can read them.
//
// Workers write to the catalog through a [Store]; coordinators and indexers
// follow it through a [View], an in-memory copy kept current by a watch.
package catalog
