;;; forj-hooks.el --- The user's own hooks around tool calls and turns  -*- lexical-binding: t; -*-

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

;; Three abnormal hooks the user sets in their own Emacs config:
;;
;; - `forj-before-tool-call-functions': before a call is planned; a
;;   function may deny it, and the model reads the reason;
;; - `forj-after-tool-result-functions': after a call's result; a
;;   function may add a note the model reads with the result;
;; - `forj-turn-end-functions': when a turn of a chat ends.
;;
;; A project cannot add a hook: the variables are risky local
;; variables, so a .dir-locals.el or a file's local variables never set
;; them without the user's say, and forj runs only their global values
;; (`default-value'), so a buffer-local value, however it was set, is
;; never run.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)

(defcustom forj-before-tool-call-functions nil
  "Functions called before each tool call of the model is planned.
Each is called with two arguments: CALL, a plist (:id ID :name NAME
:args ARGS, ARGS the call's arguments as a plist) and ROOT, the
project root.  It returns nil to let the call go on, or a string: the
call is denied, nothing of it runs, and the model reads the string as
the reason.  The first function to deny decides.  A function that
signals an error denies the call too (the model is told a hook
failed), so a broken check never lets a call through.

Only the global value counts: a project cannot add a function here."
  :type 'hook
  :group 'forj)
(put 'forj-before-tool-call-functions 'risky-local-variable t)

(defcustom forj-after-tool-result-functions nil
  "Functions called with each tool call's result, before the model reads it.
Each is called with three arguments: CALL (as for
`forj-before-tool-call-functions'), RESULT, the result plist (:ok is
t or :false; :result, or :error), and ROOT, the project root.  It
returns nil, or a string: a note the model reads with that result,
under `user_hook_notes'.  It may do anything else it likes (format the
file the call edited, say).  A function that signals an error is
reported in the echo area; the result goes on unchanged.

Only the global value counts: a project cannot add a function here."
  :type 'hook
  :group 'forj)
(put 'forj-after-tool-result-functions 'risky-local-variable t)

(defcustom forj-turn-end-functions nil
  "Functions called when a turn of a chat ends: the prompt is the user's again.
Each is called with one argument, a plist: :buffer, the chat's
buffer (current while it runs), :root, the project root, and :reason,
nil when the model answered, else why the turn stopped (`stopped',
`failed', `capped', `paused'...).  Errors are reported in the echo
area.

Only the global value counts: a project cannot add a function here."
  :type 'hook
  :group 'forj)
(put 'forj-turn-end-functions 'risky-local-variable t)

(defun forj-hooks--functions (hook)
  "The functions of HOOK's global value, as a list.
A buffer-local value (set by a project's local variables, say) is
never consulted."
  (let ((value (default-value hook)))
    (if (or (functionp value) (and value (symbolp value))) (list value) value)))

(defun forj-hooks-deny-reason (call root)
  "Why the user's hooks deny CALL in ROOT, or nil when they let it go on."
  (cl-loop for fn in (forj-hooks--functions 'forj-before-tool-call-functions)
           for said = (condition-case err
                          (funcall fn call root)
                        (error (format "a check of the user's (%s) failed: %s"
                                       fn (error-message-string err))))
           when said
           return (if (stringp said) said
                    (format "a check of the user's (%s) refused it" fn))))

(defun forj-hooks-denied-result (call reason)
  "The result of CALL that a user's hook denied with REASON."
  (list :id (or (plist-get call :id) "") :name (or (plist-get call :name) "") :ok :false
        :error (list :type "permission-error"
                     :message (concat "The user's own check denied this call: " reason)
                     :details (list :kind "UserHookDenied")
                     :recovery ["Read the reason and change your approach; do not repeat the same call unchanged"])))

(defun forj-hooks-before-plan (entries results root)
  "Run the before-call hooks on ENTRIES of ROOT, filling RESULTS of denied ones.
RESULTS is the batch's vector of results, one per entry; a denied
call's slot gets its denial, so it is not planned."
  (when (forj-hooks--functions 'forj-before-tool-call-functions)
    (progn
      (cl-loop for entry in entries
               for index from 0
               for call = (plist-get entry :call)
               when (and call (null (aref results index)))
               do (let ((reason (forj-hooks-deny-reason call root)))
                    (when reason
                      (aset results index (forj-hooks-denied-result call reason))))))))

(defun forj-hooks-after-results (entries results root)
  "RESULTS of ENTRIES with the notes the after-result hooks add, for ROOT."
  (if (null (forj-hooks--functions 'forj-after-tool-result-functions))
      results
    (cl-loop for entry in entries
             for result in results
             for call = (plist-get entry :call)
             collect
             (let ((notes nil))
               (when (and call result)
                 (dolist (fn (forj-hooks--functions 'forj-after-tool-result-functions))
                   (condition-case err
                       (let ((note (funcall fn call result root)))
                         (when (and (stringp note) (not (string-blank-p note)))
                           (push note notes)))
                     (error (message "forj: %s failed after a result: %s"
                                     fn (error-message-string err))))))
               (if notes
                   (plist-put (copy-sequence result) :user_hook_notes (vconcat (nreverse notes)))
                 result)))))

(defun forj-hooks-turn-ended (root reason)
  "Run the turn-end hooks in the current buffer, for ROOT; REASON as they get it."
  (let ((info (list :buffer (current-buffer) :root root :reason reason)))
    (dolist (fn (forj-hooks--functions 'forj-turn-end-functions))
      (condition-case err
          (funcall fn info)
        (error (message "forj: %s failed at the end of a turn: %s"
                        fn (error-message-string err)))))))

(provide 'forj-hooks)
;;; forj-hooks.el ends here
