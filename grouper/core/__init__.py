"""The pure grouping core: owner resolution, plugin hub, decisions. No cluster access here."""
