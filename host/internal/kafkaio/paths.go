package kafkaio

import (
	"fmt"
	"strconv"
)

// pathError is an error about one value inside a structured record or
// row, at path: names and item indexes ("address.city", "tags[1]",
// "stock[k]"; "" the value itself). The path is built from the inside out
// as the error leaves the readers of the enclosing values, so that good
// values build no paths. noun is what the names are ("property" in JSON,
// "field" in rows).
type pathError struct{ noun, path, msg string }

func (e *pathError) Error() string { return fmt.Sprintf("%s %q: %s", e.noun, e.path, e.msg) }

// underName is err of a value read as the one named name.
func underName(err error, name string) error {
	pe, ok := err.(*pathError)
	if !ok {
		return err
	}
	switch {
	case pe.path == "":
		pe.path = name
	case pe.path[0] == '[':
		pe.path = name + pe.path
	default:
		pe.path = name + "." + pe.path
	}
	return pe
}

// underIndex is err of a value read as item i of a list.
func underIndex(err error, i int) error { return underBracket(err, strconv.Itoa(i)) }

// underBracket is err of a value read as the item of a list or map
// written [at].
func underBracket(err error, at string) error {
	pe, ok := err.(*pathError)
	if !ok {
		return err
	}
	at = "[" + at + "]"
	switch {
	case pe.path == "", pe.path[0] == '[':
		pe.path = at + pe.path
	default:
		pe.path = at + "." + pe.path
	}
	return pe
}
