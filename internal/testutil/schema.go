package testutil

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// SchemaLimitKeywords are the JSON Schema keywords that state a default or
// a limit, which some MCP clients drop before their model sees a tool
// (Codex CLI drops default, minLength, maxLength, minimum, maximum,
// exclusiveMinimum and maxItems): rootgate's tools say the value of each
// in the words of a description too.
var SchemaLimitKeywords = []string{"default", "minLength", "maxLength", "minimum", "maximum",
	"exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "minProperties", "maxProperties", "pattern"}

// Describes reports whether the description desc states keyword k's value
// v: a number as a number of its own (1 also as "at least one" or "not
// empty" for a min… keyword), a string or boolean as a word of its own.
func Describes(desc, k string, v any) bool {
	var word string
	switch v := v.(type) {
	case float64:
		if v == 1 && strings.HasPrefix(k, "min") && (strings.Contains(desc, "at least one") || strings.Contains(desc, "not empty")) {
			return true
		}
		word = strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		word = v
	case bool:
		word = strconv.FormatBool(v)
	default:
		word = fmt.Sprint(v)
	}
	return regexp.MustCompile(`(^|[^0-9A-Za-z_.])` + regexp.QuoteMeta(word) + `($|[^0-9A-Za-z_.]|\.($|[^0-9]))`).MatchString(desc)
}
