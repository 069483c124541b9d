"""The only code that queries the database. Tenant-owned rows are reached only through a
repository built for one tenant, and every query it runs filters on that tenant."""
