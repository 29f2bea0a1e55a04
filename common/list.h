/*
 * common/list.h - the intrusive doubly linked list: a head pointer, and
 * prev/next fields in each node (the dispatcher's runs, subscribers, feeds
 * and enqueues).  Header-only macros; no locking: a list belongs to one
 * thread.  The arguments are evaluated more than once: pass plain lvalues.
 */
#ifndef RUNNEL_COMMON_LIST_H
#define RUNNEL_COMMON_LIST_H

#include <stddef.h>

/* Puts node first in the list at head. */
#define RN_LIST_PUSH(head, node) \
	do { \
		(node)->prev = NULL; \
		(node)->next = (head); \
		if ((head)) \
			(head)->prev = (node); \
		(head) = (node); \
	} while (0)

/* Takes node out of the list at head and clears its links; a node on no
 * list (no prev, and not the head) is left as it is, so unlinking twice is
 * safe. */
#define RN_LIST_UNLINK(head, node) \
	do { \
		if ((node)->prev) \
			(node)->prev->next = (node)->next; \
		else if ((head) == (node)) \
			(head) = (node)->next; \
		if ((node)->next) \
			(node)->next->prev = (node)->prev; \
		(node)->next = (node)->prev = NULL; \
	} while (0)

#endif
