package changes

import "github.com/envd-dev/envd/api/types"

// ComparePackageDatabases compares two contents of one package database:
// dpkg's status (manager "dpkg") or apk's installed database ("apk"); nil
// for another manager. A nil content is a side without the database.
func ComparePackageDatabases(manager string, before, after []byte) *types.PackageChanges {
	parse := parseDpkgStatus
	switch manager {
	case "dpkg":
	case "apk":
		parse = parseApkInstalled
	default:
		return nil
	}
	return comparePackages(manager, parse(before), parse(after))
}
