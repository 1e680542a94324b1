;;; forj-session.el --- What a chat knows, apart from how it is shown  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; A chat's session: one `forj-session' record holding what the chat
;; knows (its project, provider, the worker's tools, the record of the
;; conversation, where the turn stands, the batch or reply under way),
;; held by the chat buffer in the buffer-local `forj-session'.
;;
;; The chat buffer is only a view of its session: forj-loop.el sends,
;; streams and runs batches by changing the session, and tells the view
;; what to draw through the session's view function.

;;; Code:

(require 'cl-lib)
(require 'forj)

;;; The session

(cl-defstruct (forj-session (:constructor forj-session-create)
                            (:copier nil))
  "What a chat knows."
  (id nil :documentation "The chat's id: names its saved copy and starts its turn ids.")
  (root nil :documentation "The project root.")
  (root-confirmed nil :documentation "Non-nil once the root is known to be the user's choice.")
  (provider nil :documentation "The provider plist.")
  (tools nil :documentation "The worker's tool definitions for the chat's permission mode.")
  (permission-instructions
   nil :documentation "Sentences the worker's rules add to the model's instructions.")
  (greeted nil :documentation "The worker whose hello warnings the chat has shown.")
  (record nil :documentation "The conversation: a list of entries (:role ROLE :text TEXT).
ROLE is \"meta\" (the first line), \"notice\", \"user\", \"assistant\"
or \"tool\"; TEXT is the entry's part of the transcript, exactly.  What
the model reads is parsed from the concatenated texts.")
  (state 'idle :documentation "What the chat is doing: `idle', `streaming' or `tools'.")
  (turn 0 :documentation "Counts sends and stops.
A callback of an older turn finds it changed and does nothing.")
  (turn-id nil :documentation "The id of the user message being answered (the turn), or nil.")
  (turn-state nil :documentation "(TURN . STATE): what the worker last said of the turn TURN.
STATE is the `turn' of an execute reply (before_exit, exit_loop,
continue_loop, instructions).")
  (iterations 0 :documentation "Tool batches run for the current user message.")
  (capped nil :documentation "Non-nil once the iteration cap answered a batch.")
  (cancelled nil :documentation "Non-nil once the user stopped the turn.")
  (stream nil :documentation "The provider request under way, if any.")
  (reply nil :documentation "The text of the reply being streamed so far, or nil.")
  (stop-info nil :documentation "Why the reply being streamed ended early, as its provider said.")
  (batch nil :documentation "The tool batch running, if any.")
  (continuation nil :documentation "What `forj-continue' does: nil, or (:kind KIND :text TEXT).")
  (held-notices nil :documentation "Notices that arrived while a reply streamed (newest first)."))

(defvar-local forj-session nil
  "The session of this chat buffer, or nil outside a chat.")
(put 'forj-session 'permanent-local t)

(defun forj-session-renew (&optional old)
  "A fresh session with the id and the record of OLD, if any.
A chat whose mode starts again keeps only these, as a buffer keeps its
permanent local variables."
  (forj-session-create :id (and old (forj-session-id old))
                       :record (and old (forj-session-record old))))

(defun forj-session-current-root ()
  "The project root of this buffer's session, or nil outside a chat."
  (and forj-session (forj-session-root forj-session)))

(provide 'forj-session)
;;; forj-session.el ends here
