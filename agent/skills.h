/*
 * agent/skills.h - skill discovery: every <dir>/<name>/SKILL.md, its YAML
 * front matter's name and description, listed for the system prompt so the
 * model knows what it can read and run (through read_file and bash).
 */
#ifndef RUNNEL_AGENT_SKILLS_H
#define RUNNEL_AGENT_SKILLS_H

#include <stddef.h>

#define AGENT_SKILLS_MAX 256

/*
 * Scans dir.  Returns the number of skills found (0 when dir is missing) and
 * sets *prompt to a new text block for the system prompt (NULL when none).
 */
int agent_skills_scan(const char *dir, char **prompt);

/* Parses SKILL.md front matter (---\nname: x\ndescription: y\n---) out of
 * text[0..len): fills name and description ("" when absent).  0, or -1 when
 * the text has no front matter.  Exposed for the tests. */
int agent_skills_front_matter(const char *text, size_t len, char *name, size_t name_size, char *desc,
                              size_t desc_size);

#endif
