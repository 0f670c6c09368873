package openapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

func TestQueryPairs(t *testing.T) {
	form, formFlat := &openapi3.SerializationMethod{Style: "form", Explode: true}, &openapi3.SerializationMethod{Style: "form"}
	tests := []struct {
		name   string
		value  any
		method *openapi3.SerializationMethod
		want   string
	}{
		{"scalar", "a b&c", form, "q=a%20b%26c"},
		{"number", json.Number("1.5"), form, "q=1.5"},
		{"exploded array", []any{"x", "y/z"}, form, "q=x&q=y%2Fz"},
		{"flat array", []any{json.Number("1"), json.Number("2")}, formFlat, "q=1,2"},
		{"space delimited", []any{"a", "b"}, &openapi3.SerializationMethod{Style: "spaceDelimited"}, "q=a%20b"},
		{"pipe delimited", []any{"a", "b"}, &openapi3.SerializationMethod{Style: "pipeDelimited"}, "q=a%7Cb"},
		{"empty array", []any{}, form, ""},
		{"exploded object", map[string]any{"b": "2", "a": true}, form, "a=true&b=2"},
		{"flat object", map[string]any{"b": "2", "a": "1"}, formFlat, "q=a,1,b,2"},
		{"deep object", map[string]any{"color": "red", "size": json.Number("3")}, &openapi3.SerializationMethod{Style: "deepObject", Explode: true}, "q%5Bcolor%5D=red&q%5Bsize%5D=3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pairs, err := queryPairs("q", tt.value, tt.method, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(pairs, "&"); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := queryPairs("q", []any{map[string]any{}}, form, false); err == nil {
		t.Error("an array of objects was encoded")
	}
}

func TestPathValue(t *testing.T) {
	tests := []struct {
		name   string
		value  any
		method openapi3.SerializationMethod
		want   string
	}{
		{"simple scalar", "a/b c", openapi3.SerializationMethod{Style: "simple"}, "a%2Fb%20c"},
		{"simple array", []any{"a,b", "c"}, openapi3.SerializationMethod{Style: "simple"}, "a%2Cb,c"},
		{"simple object", map[string]any{"x": "1", "y": "2"}, openapi3.SerializationMethod{Style: "simple"}, "x,1,y,2"},
		{"simple exploded object", map[string]any{"x": "1", "y": "2"}, openapi3.SerializationMethod{Style: "simple", Explode: true}, "x=1,y=2"},
		{"label", "v", openapi3.SerializationMethod{Style: "label"}, ".v"},
		{"label exploded array", []any{"a", "b"}, openapi3.SerializationMethod{Style: "label", Explode: true}, ".a.b"},
		{"matrix", "v", openapi3.SerializationMethod{Style: "matrix"}, ";id=v"},
		{"matrix exploded array", []any{"a", "b"}, openapi3.SerializationMethod{Style: "matrix", Explode: true}, ";id=a;id=b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pathValue("id", tt.value, &tt.method)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestJSONSchema(t *testing.T) {
	min0, max10 := 0.0, 10.0
	yes := true
	node := &openapi3.SchemaRef{Value: &openapi3.Schema{Type: &openapi3.Types{"object"}}}
	node.Value.Properties = openapi3.Schemas{"next": node} // a list that contains itself
	ref := &openapi3.SchemaRef{Ref: "#/components/schemas/X", Value: &openapi3.Schema{
		Type: &openapi3.Types{"object"},
		Properties: openapi3.Schemas{
			"count": {Value: &openapi3.Schema{Type: &openapi3.Types{"integer"}, Min: &min0, Max: &max10, ExclusiveMax: openapi3.ExclusiveBound{Bool: &yes}}},
			"note":  {Value: &openapi3.Schema{Type: &openapi3.Types{"string"}, Nullable: true, Enum: []any{"a"}}},
			"list":  node,
		},
		Required:      []string{"count"},
		Discriminator: &openapi3.Discriminator{PropertyName: "kind"},
	}}
	data, err := json.Marshal(jsonSchema(ref, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"properties":{"count":{"exclusiveMaximum":10,"minimum":0,"type":"integer"},"list":{"properties":{"next":{}},"type":"object"},"note":{"enum":["a",null],"type":["string","null"]}},"required":["count"],"type":"object"}`
	if string(data) != want {
		t.Errorf("got  %s\nwant %s", data, want)
	}
}

func TestInputSchemaClashes(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData([]byte(`
openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /things/{id}:
    put:
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - {name: id, in: query, schema: {type: string}, description: Revision.}
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              required: [id]
              properties:
                id: {type: string}
                query_id: {type: string}
      responses: {"200": {description: ok}}
`))
	if err != nil {
		t.Fatal(err)
	}
	item := doc.Paths.Value("/things/{id}")
	op, schema, err := buildOperation("PUT", "/things/{id}", item, item.Put, nil)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties map[string]struct {
			Description string `json:"description"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range op.args {
		got[a.property] = a.in + ":" + a.name
	}
	want := map[string]string{"id": "path:id", "query_id": "query:id", "body_id": "body:id", "body_query_id": "body:query_id"}
	for property, where := range want {
		if got[property] != where {
			t.Errorf("property %q carries %q, want %q (all: %v)", property, got[property], where, got)
		}
	}
	if d := s.Properties["query_id"].Description; !strings.HasPrefix(d, "Revision.") || !strings.Contains(d, `the path parameter "id"`) {
		t.Errorf("query_id description %q", d)
	}
	if d := s.Properties["body_query_id"].Description; !strings.Contains(d, `the query parameter "id"`) {
		t.Errorf("body_query_id description %q", d)
	}
	if strings.Join(s.Required, ",") != "id,body_id" {
		t.Errorf("required %v", s.Required)
	}
}
