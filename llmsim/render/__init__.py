"""Wire bytes from templates/*.yaml: the template compiler, its expression language, the JSON and SSE writers.
May import only the leaves (errors, datafiles); never sim, pacing, server or anything above.
"""
