package types

// PoolSetting is a project's warm pool, the body of PUT
// /v1/projects/{p}/pool: Size started instances of the current version
// kept ready (0 to 20; 0 = none). `POST .../instances` of the current
// version, asking nothing else than a TTL, claims one of them.
type PoolSetting struct {
	Size int `json:"size"`
}
