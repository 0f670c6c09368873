package oidc

import (
	"fmt"
	"strings"
)

// claim finds claim name: the claim of that whole name, else, for a name
// with dots, the path through nested objects ("realm_access.roles").
func (t *Token) claim(name string) (any, bool) {
	if v, ok := t.Claims[name]; ok {
		return v, true
	}
	if !strings.Contains(name, ".") {
		return nil, false
	}
	var cur any = t.Claims
	for part := range strings.SplitSeq(name, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Strings reads claim name as a list: a string is the list of its words
// (separated by spaces, as OAuth writes scopes), an array must hold
// strings only. found is false when the token has no such claim.
func (t *Token) Strings(name string) (list []string, found bool, err error) {
	v, ok := t.claim(name)
	if !ok || v == nil {
		return nil, false, nil
	}
	switch v := v.(type) {
	case string:
		return strings.Fields(v), true, nil
	case []any:
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, true, fmt.Errorf("claim %s: element %d is %s, not a string", name, i, kind(e))
			}
			list = append(list, s)
		}
		return list, true, nil
	}
	return nil, true, fmt.Errorf("claim %s is %s, not a string or a list of strings", name, kind(v))
}

// String reads claim name as one string.
func (t *Token) String(name string) (string, bool) {
	v, ok := t.claim(name)
	s, isString := v.(string)
	return s, ok && isString
}

// Holds reports whether claim name grants value: with value empty, the
// claim is the boolean true; otherwise it is value, a list holding it, or a
// string of words one of which is value.
func (t *Token) Holds(name, value string) (bool, error) {
	v, ok := t.claim(name)
	if !ok || v == nil {
		return false, nil
	}
	if value == "" {
		b, isBool := v.(bool)
		if !isBool {
			return false, fmt.Errorf("claim %s is %s, not true or false", name, kind(v))
		}
		return b, nil
	}
	if b, isBool := v.(bool); isBool {
		return false, fmt.Errorf("claim %s is %t, not a string or a list holding %q", name, b, value)
	}
	list, _, err := t.Strings(name)
	if err != nil {
		return false, err
	}
	for _, s := range list {
		if s == value {
			return true, nil
		}
	}
	return false, nil
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
