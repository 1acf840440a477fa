// Package fill sets every field of a value to something other than its
// zero value, for tests that check a conversion between two types keeps
// every field: a field the conversion forgets shows in the JSON.
package fill

import (
	"reflect"
	"time"
)

// Time is the time Fill sets.
var Time = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

// Fill sets every exported field of the value ptr points to, recursively:
// strings to "s", numbers to 3 (floats 1.5), booleans to true, byte
// slices to "payload", times to Time, and slices and maps to one such
// element. Pointers are followed six levels deep.
func Fill(ptr any) {
	value(reflect.ValueOf(ptr).Elem(), 0)
}

// Value is Fill of a reflect.Value that can be set.
func Value(v reflect.Value) {
	value(v, 0)
}

func value(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Pointer:
		if depth > 6 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		value(v.Elem(), depth+1)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(Time))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				value(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte("payload"))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		value(v.Index(0), depth+1)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k := reflect.New(v.Type().Key()).Elem()
		value(k, depth+1)
		e := reflect.New(v.Type().Elem()).Elem()
		value(e, depth+1)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	}
}
