package messages

import (
	"reflect"
	"sync"
	"time"
)

var timeType = reflect.TypeFor[time.Time]()

// typesWithTimes caches, per type, whether a value of it can hold a
// time.Time.
var typesWithTimes sync.Map

// holdsTimes reports whether a value of type t can hold a time.Time, in
// an exported field, element or map value, at any depth.
func holdsTimes(t reflect.Type) bool {
	if v, ok := typesWithTimes.Load(t); ok {
		return v.(bool)
	}
	holds := holdsTimesWithin(t, map[reflect.Type]bool{})
	typesWithTimes.Store(t, holds)
	return holds
}

// holdsTimesWithin is holdsTimes; seen holds the types being looked at,
// for a type that refers to itself.
func holdsTimesWithin(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == timeType {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return holdsTimesWithin(t.Elem(), seen)
	case reflect.Map:
		return holdsTimesWithin(t.Elem(), seen)
	case reflect.Interface:
		return true // whatever it holds
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && holdsTimesWithin(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// checkTimes refuses a value holding a time that JSON cannot hold (years
// 0 to 9999), for a message the msgpack library decoded: its reader takes
// any timestamp, and every message must encode in both codecs.
func checkTimes(v reflect.Value) error {
	if !holdsTimes(v.Type()) {
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return checkTimes(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if err := checkTimes(v.Index(i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if err := checkTimes(it.Value()); err != nil {
				return err
			}
		}
	case reflect.Struct:
		if v.Type() == timeType {
			return checkYear(v.Interface().(time.Time))
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				if err := checkTimes(v.Field(i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
