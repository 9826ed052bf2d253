package envd

import "github.com/envd-dev/envd/envd/names"

// ValidateName checks a project, image or tenant name.
func ValidateName(kind, name string) error { return names.Validate(kind, name) }
