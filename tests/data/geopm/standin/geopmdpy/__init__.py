"""Stand-in for GEOPM's geopmdpy (libgeopmd cannot be installed here): the ``pio`` and ``topo``
calls the hpcmon exporter uses, with the real signatures, error type (RuntimeError) and
behaviour (push only before the first read_batch, SI units, derivative signals NaN on the
first batch). Values come from a simple platform model, configured by tests through
``pio._standin_configure``."""

__version_str__ = "3.2.2+standin"
