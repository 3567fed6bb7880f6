"""The build stage of compiled candidates (docs/guide/compiled-candidates.md): which candidates need one
(:mod:`.detect`), what a build depends on (:mod:`.toolchain`), the cache of built objects (:mod:`.cache`), the
compiler's first error (:mod:`.compiler_log`) and the stage in the flow (:mod:`.stage`)."""
