package toolschema

// Limits of OpenAI's strict mode (Structured Outputs), taken at their most
// conservative published values.
const (
	strictMaxDepth      = 5
	strictMaxProperties = 100
	strictMaxEnumValues = 500
)

// strictKeywords are the keywords OpenAI's strict mode accepts.
var strictKeywords = map[string]bool{
	"type": true, "description": true, "title": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "anyOf": true, "$ref": true, "$defs": true, "definitions": true,
	"pattern": true, "format": true, "minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"multipleOf": true, "minItems": true, "maxItems": true,
}

// strictAnnotations carry no constraint, so strict mode may drop them.
var strictAnnotations = []string{"default", "examples", "$comment", "deprecated", "readOnly", "writeOnly", "$schema", "$id"}

var strictFormats = map[string]bool{
	"date-time": true, "time": true, "date": true, "duration": true, "email": true, "hostname": true, "ipv4": true, "ipv6": true, "uuid": true,
}

// makeStrict prepares root for OpenAI's strict mode when that keeps its
// meaning: every object lists all its properties as required and allows no
// others (additionalProperties: false is added where absent, which only
// stops the model from inventing members), only supported keywords and
// formats appear, and the limits hold. It reports whether root is now
// strict; when not, root is left unchanged. Optional properties are not
// rewritten as required-but-nullable: that would change the arguments the
// tool receives.
func makeStrict(root *object) bool {
	if root.has("anyOf") || !strictEligible(root) {
		return false
	}
	walk(root, 0, func(o *object, _ int) {
		for _, k := range strictAnnotations {
			o.del(k)
		}
		if hasType(o, "object") && !o.has("additionalProperties") {
			o.set("additionalProperties", false)
		}
	})
	return true
}

func strictEligible(root *object) bool {
	ok := true
	properties, enums := 0, 0
	var check func(v any, objectDepth int)
	check = func(v any, objectDepth int) {
		o, isObject := v.(*object)
		if !isObject || !ok {
			ok = ok && isObject
			return
		}
		for _, k := range o.keys {
			if !strictKeywords[k] && !contains(strictAnnotations, k) {
				ok = false
				return
			}
		}
		if f, has := o.str("format"); has && !strictFormats[f] {
			ok = false
			return
		}
		if l, has := o.list("enum"); has {
			enums += len(l)
		}
		if hasType(o, "object") {
			objectDepth++
			props, hasProps := o.obj("properties")
			if !hasProps || objectDepth > strictMaxDepth {
				ok = false
				return
			}
			if ap, has := o.get("additionalProperties"); has && ap != false {
				ok = false
				return
			}
			required := stringList(o, "required")
			for _, k := range props.keys {
				if !contains(required, k) {
					ok = false
					return
				}
			}
			properties += props.len()
		} else if o.has("properties") {
			ok = false
			return
		}
		if hasType(o, "array") && !o.has("items") {
			ok = false
			return
		}
		eachSubschema(o, func(key string, c any) any {
			if _, isBool := c.(bool); isBool && booleanSlots[key] {
				return c
			}
			check(c, objectDepth)
			return c
		})
	}
	check(root, 0)
	return ok && properties <= strictMaxProperties && enums <= strictMaxEnumValues
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
