/*
 * tests/builtin/skillblob.c - a skill zip served by the workspace stub (see
 * skillblob.h).
 */
#include "tests/builtin/skillblob.h"

#include <archive.h>
#include <archive_entry.h>
#include <string.h>

void skill_blob(wt_t *T, const char *name, const skill_file_t *files, size_t n, char *url, size_t url_size)
{
	char *path = th_strf("%s/%s", T->dir, name);
	struct archive *a = archive_write_new();
	archive_write_set_format_zip(a);
	TH_REQUIRE(archive_write_open_filename(a, path) == ARCHIVE_OK, "zip %s", path);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, files[i].name);
		archive_entry_set_size(e, (la_int64_t)strlen(files[i].data));
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_perm(e, files[i].mode);
		archive_write_header(a, e);
		archive_write_data(a, files[i].data, strlen(files[i].data));
		archive_entry_free(e);
	}
	archive_write_close(a);
	archive_write_free(a);
	TH_REQUIRE(dev_stub_add_blob_file(T->stub, name, path) == 0, "blob %s", name);
	dev_stub_blob_url(T->stub, name, url, url_size);
}
