"""Pure, typed domain types: the map's parts, requests and decisions."""
