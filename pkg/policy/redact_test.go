package policy

import (
	"strconv"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	const schema = `{
		"type": "object",
		"$defs": {"secret": {"type": "string", "x-sensitive": true}},
		"properties": {
			"user": {"type": "string"},
			"pin": {"type": "string", "writeOnly": true},
			"pass": {"type": "string", "format": "password"},
			"key": {"$ref": "#/$defs/secret"},
			"conn": {"type": "object", "properties": {"dsn": {"allOf": [{"type": "string"}, {"x-sensitive": true}]}, "host": {"type": "string"}}},
			"creds": {"type": "array", "items": {"type": "object", "properties": {"pin": {"writeOnly": true}, "name": {}}}},
			"pair": {"type": "array", "prefixItems": [{"type": "string"}, {"writeOnly": true}]},
			"tuple": {"type": "array", "items": [{"type": "string"}], "additionalItems": {"writeOnly": true}},
			"env": {"type": "object", "additionalProperties": {"writeOnly": true}},
			"labels": {"type": "object", "patternProperties": {"^s_": {"writeOnly": true}}, "additionalProperties": {"type": "string"}},
			"choice": {"anyOf": [{"type": "integer"}, {"type": "string", "writeOnly": true}]},
			"loop": {"$ref": "#/properties/loop"}
		}
	}`
	for _, tc := range []struct {
		name      string
		schema    string
		arguments string
		want      string
	}{
		{"nothing sensitive", schema, `{"user": "ann", "count": 2}`, `{"count":2,"user":"ann"}`},
		{"schema-marked", schema, `{"user": "ann", "pin": "1234", "pass": "pw", "key": "k"}`,
			`{"key":"[redacted]","pass":"[redacted]","pin":"[redacted]","user":"ann"}`},
		{"nested object", schema, `{"conn": {"dsn": "postgres://u:p@h", "host": "h"}}`, `{"conn":{"dsn":"[redacted]","host":"h"}}`},
		{"array items", schema, `{"creds": [{"pin": 1, "name": "a"}, {"pin": 2, "name": "b"}]}`,
			`{"creds":[{"name":"a","pin":"[redacted]"},{"name":"b","pin":"[redacted]"}]}`},
		{"prefixItems", schema, `{"pair": ["id", "secret"]}`, `{"pair":["id","[redacted]"]}`},
		{"tuple items", schema, `{"tuple": ["id", "s1", "s2"]}`, `{"tuple":["id","[redacted]","[redacted]"]}`},
		{"additionalProperties", schema, `{"env": {"A": "1", "B": {"c": 2}}}`, `{"env":{"A":"[redacted]","B":"[redacted]"}}`},
		{"patternProperties", schema, `{"labels": {"s_x": "1", "plain": "2"}}`, `{"labels":{"plain":"2","s_x":"[redacted]"}}`},
		{"anyOf branch", schema, `{"choice": 5}`, `{"choice":"[redacted]"}`},
		{"cyclic $ref", schema, `{"loop": {"a": 1}}`, `{"loop":{"a":1}}`},
		{"names", "", `{"Password": "x", "db_passwd": "x", "clientSecret": "x", "GITHUB_TOKEN": "x", "x-api-key": "x", "apiKey": "x",
			"AWS_ACCESS_KEY_ID": "x", "private-key": "x", "Authorization": "x", "credentials": {"u": 1}, "Set-Cookie": "x", "session_id": "x",
			"max_tokens": 10, "name": "x", "keyboard": "x"}`,
			`{"AWS_ACCESS_KEY_ID":"[redacted]","Authorization":"[redacted]","GITHUB_TOKEN":"[redacted]","Password":"[redacted]","Set-Cookie":"[redacted]",` +
				`"apiKey":"[redacted]","clientSecret":"[redacted]","credentials":"[redacted]","db_passwd":"[redacted]","keyboard":"x","max_tokens":"[redacted]",` +
				`"name":"x","private-key":"[redacted]","session_id":"[redacted]","x-api-key":"[redacted]"}`},
		{"names, nested in arrays", "", `{"items": [{"headers": {"authorization": "Bearer x", "accept": "*/*"}}]}`,
			`{"items":[{"headers":{"accept":"*/*","authorization":"[redacted]"}}]}`},
		{"whole arguments sensitive", `{"writeOnly": true}`, `{"a": 1}`, `"[redacted]"`},
		{"invalid schema is ignored", `{`, `{"token": "t", "a": 1}`, `{"a":1,"token":"[redacted]"}`},
		{"invalid arguments", schema, `{"pin": "1234"`, `"[redacted]"`},
		{"empty arguments", schema, ``, ``},
		{"not an object", schema, `[1, {"secret": 2}]`, `[1,{"secret":"[redacted]"}]`},
		{"deterministic order", "", `{"b": 1, "a": 2}`, `{"a":2,"b":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Redact(messages.JSON(tc.schema), messages.JSON(tc.arguments))
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestRedactSchemaBudget(t *testing.T) {
	t.Parallel()
	// Each level refers to the next twice: 2^30 paths unless the budget
	// stops the walk, after which values count as sensitive.
	schema := `{"$defs": {`
	for i := range 30 {
		schema += `"d` + strconv.Itoa(i) + `": {"allOf": [{"$ref": "#/$defs/d` + strconv.Itoa(i+1) + `"}, {"$ref": "#/$defs/d` + strconv.Itoa(i+1) + `"}]},`
	}
	schema += `"d30": {}}, "$ref": "#/$defs/d0"}`
	got := Redact(messages.JSON(schema), messages.JSON(`{"a": 1}`))
	if string(got) != `"[redacted]"` {
		t.Fatalf("got %s", got)
	}
}
