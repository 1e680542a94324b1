;;; forj-undo.el --- Undo forj's last batch; rewind code and chat to a turn  -*- lexical-binding: t; -*-

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

;; Every batch that changed files through forj's own file tools is a
;; checkpoint in the worker's journal, grouped by the turn (the user
;; message) it answered.  Changes made by commands (`run_shell',
;; `run_tests') have no backups and are in no checkpoint.
;;
;; `M-x forj-undo' puts back the files of the newest batch not yet
;; undone; `M-x forj-rewind' puts the project's files, the
;; conversation, or both, back to before one of the chat's turns.
;; Either way the worker first says what would change (a dry run); the
;; diffs open in the review buffer for approval, and a file someone
;; changed since forj wrote it is overwritten only if the user says so
;; (what it held is backed up first).  After the change every buffer
;; visiting a changed file is reverted.  An undo is itself a batch:
;; undoing it brings the changes back.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj-loop)
(require 'forj-files)
(require 'forj-session)

(defun forj-undo--root ()
  "The project root of the current buffer (the chat's own root in a chat)."
  (if (and (derived-mode-p 'forj-chat-mode) (forj-session-root forj-session))
      (forj-session-root forj-session)
    (forj-worker-project-root)))

(defun forj-undo--with-worker (root then)
  "Call THEN with ROOT's worker connection once the worker is ready."
  (forj-worker-ensure root
                      (lambda (worker) (funcall then (forj-worker-connection worker)))
                      (lambda (err) (message "forj: the worker could not start: %s"
                                             (or (plist-get err :message) err)))))

(defun forj-undo--say (format-string &rest args)
  "Say FORMAT-STRING with ARGS in the echo area, and as a notice in a chat."
  (let ((text (apply #'format format-string args)))
    (if (derived-mode-p 'forj-chat-mode)
        (forj-session-notice text)
      (message "forj: %s" text))))

(defun forj-undo--error (err)
  "Report the protocol error ERR of an undo or rewind."
  (forj-undo--say "%s%s" (or (plist-get err :message) err)
                  (let ((recovery (append (plist-get err :recovery) nil)))
                    (if recovery (concat " (" (string-join recovery "; ") ")") ""))))

;;; The common flow: dry run, ask, review, apply

(defun forj-undo--run (root method body what done)
  "In ROOT, run METHOD (\"undo\" or \"rewind\") with BODY once approved.
A dry run comes first; its diffs open in the review.
WHAT names the change for people.  DONE, if non-nil, is called with
the applied reply."
  (let ((buffer (current-buffer)))
    (forj-undo--with-worker
     root
     (lambda (conn)
       (forj-epc-call
        conn method (append body (list :dry_run t))
        :success (lambda (dry)
                   (with-current-buffer (if (buffer-live-p buffer) buffer (current-buffer))
                     (forj-undo--review conn root method body what dry done)))
        :error (lambda (err)
                 (with-current-buffer (if (buffer-live-p buffer) buffer (current-buffer))
                   (forj-undo--error err))))))))

(defun forj-undo--ask-force (files)
  "Ask about each of FILES changed since forj wrote it; return the forced paths.
Return the symbol `refused' when the user keeps one of them."
  (let ((forced nil) (refused nil))
    (dolist (file files)
      (when (and (not refused) (equal (plist-get file :status) "changed"))
        (if (yes-or-no-p (format "%s changed since forj wrote it; overwrite it (what it holds now is backed up first)? "
                                 (plist-get file :path)))
            (push (plist-get file :path) forced)
          (setq refused t))))
    (if refused 'refused (nreverse forced))))

(defun forj-undo--review (conn root method body what dry done)
  "Show the dry run DRY of METHOD for approval, then apply it.
CONN, ROOT, BODY, WHAT and DONE are as for `forj-undo--run'."
  (let* ((files (append (plist-get dry :files) nil))
         (blocked (cl-remove-if-not (lambda (f) (member (plist-get f :status) '("no-backup" "refused")))
                                    files))
         (buffer (current-buffer)))
    (cond
     ((null files) (forj-undo--say "%s: nothing to put back" what))
     (blocked
      (forj-undo--say "%s is not possible: %s" what
                      (mapconcat (lambda (f) (format "%s (%s)" (plist-get f :path)
                                                     (if (equal (plist-get f :status) "no-backup")
                                                         "no backup of it was kept"
                                                       "forj may not write it now")))
                                 blocked ", ")))
     (t
      (let ((force (forj-undo--ask-force files)))
        (if (eq force 'refused)
            (forj-undo--say "%s: not done; a file changed since forj wrote it stays as it is" what)
          (let ((changes (cl-remove-if (lambda (f) (equal (plist-get f :action) "none")) files)))
            (if (null changes)
                (forj-undo--say "%s: the files already are as they were" what)
              (forj-review-open
               (list (list :id "undo"
                           :risk "medium"
                           :summary (format "%s: %s" what
                                            (mapconcat (lambda (f) (format "%s %s" (plist-get f :action)
                                                                           (plist-get f :path)))
                                                       changes ", "))
                           :warnings (vconcat (mapcar (lambda (p) (format "%s changed since forj wrote it; you chose to overwrite it" p))
                                                      force))
                           :preview (mapconcat (lambda (f) (or (plist-get f :diff) "")) changes "")))
               (lambda (approved _denied _modified &optional _cancelled _grants)
                 (with-current-buffer (if (buffer-live-p buffer) buffer (current-buffer))
                   (if (not (member "undo" approved))
                       (forj-undo--say "%s: not done" what)
                     (forj-undo--apply conn root method (append body (list :force (vconcat force)))
                                       what done)))))))))))))

(defun forj-undo--apply (conn root method body what done)
  "Run METHOD with BODY on CONN, revert the buffers of ROOT, call DONE.
WHAT names the change for people."
  (let ((buffer (current-buffer)))
    (forj-epc-call
     conn method body
     :success (lambda (reply)
                (with-current-buffer (if (buffer-live-p buffer) buffer (current-buffer))
                  (let ((paths (mapcar (lambda (f) (plist-get f :path)) (append (plist-get reply :files) nil))))
                    (forj-files-applied root paths)
                    (forj-undo--say "%s: done (%s); M-x forj-undo undoes it" what
                                    (string-join paths ", "))
                    (when done (funcall done reply)))))
     :error (lambda (err)
              (with-current-buffer (if (buffer-live-p buffer) buffer (current-buffer))
                (forj-undo--error err))))))

;;; Undo

;;;###autoload
(defun forj-undo ()
  "Undo the newest batch of file edits by forj in this project, not undone yet.
The files go back to what they held before it: files it created are
deleted, files it deleted come back.  The diffs open for approval
first.  An undo is itself undoable: the next \\[forj-undo] undoes it."
  (interactive)
  (let ((root (forj-undo--root))
        (buffer (current-buffer)))
    (forj-undo--with-worker
     root
     (lambda (conn)
       (forj-epc-call
        conn "checkpoints" (list :limit 200)
        :success (lambda (reply)
                   (with-current-buffer (if (buffer-live-p buffer) buffer (current-buffer))
                     (let ((last (cl-find-if (lambda (c) (memq (plist-get c :undone_by) '(nil :null)))
                                             (append (plist-get reply :checkpoints) nil))))
                       (if (null last)
                           (forj-undo--say "no change of forj's to undo in this project")
                         (forj-undo--run root "undo" (list :batch_id (plist-get last :batch_id))
                                         (format "undo of %s"
                                                 (if (equal (plist-get last :kind) "undo")
                                                     "the last undo"
                                                   (format "the batch of %s"
                                                           (format-time-string "%H:%M:%S" (plist-get last :time)))))
                                         nil)))))
        :error #'forj-undo--error)))))

;;; Rewind

(defun forj-undo--turns (checkpoints)
  "Return each user message of the chat with a turn id, newest first.
Each is a plist (:turn :time :text :index :files).
CHECKPOINTS (the worker's, by turn) give each turn's changed files."
  (cl-loop for entry in (forj-session-record forj-session)
           for index from 0
           when (and (equal (plist-get entry :role) "user") (plist-get entry :turn))
           collect (let ((turn (plist-get entry :turn)))
                     (list :turn turn :time (plist-get entry :time) :index index
                           :text (car (split-string
                                       (string-trim (forj-session-unescape
                                                     (cdr (forj-session-split-heading (plist-get entry :text)))))
                                       "\n"))
                           :files (delete-dups
                                   (cl-loop for c in checkpoints
                                            when (and (equal (plist-get c :turn) turn)
                                                      (equal (plist-get c :kind) "tools"))
                                            append (mapcar (lambda (f) (plist-get f :path))
                                                           (append (plist-get c :files) nil))))))
           into turns
           finally return (nreverse turns)))

(defun forj-undo--describe-turn (turn)
  "One line for TURN: its time, the first line of the message, files changed."
  (format "%s  %s  [%s]"
          (format-time-string "%m-%d %H:%M:%S" (or (plist-get turn :time) 0))
          (plist-get turn :text)
          (let ((files (plist-get turn :files)))
            (if files (string-join files ", ") "no files changed"))))

;;;###autoload
(defun forj-rewind (&optional turn-id what)
  "Go back to before the chat's turn TURN-ID: WHAT is `code', `chat' or `both'.
`code' puts the files forj changed from that turn on back as they were
before it (after showing the diffs for approval); `chat' cuts the
conversation just before that message and puts its text back in the
input; `both' does the first, then the second.  Interactively, the
turns are listed (time, the first line of your message, the files
changed) once the worker has said which files each changed."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq (forj-session-state forj-session) 'idle) (user-error "A turn is under way; stop it first"))
  (if turn-id
      (forj-undo--rewind turn-id what)
    (let ((buffer (current-buffer)))
      (forj-undo--with-worker
       (forj-session-root forj-session)
       (lambda (conn)
         (forj-epc-call conn "checkpoints" (list :limit 1000)
                        :success (lambda (reply)
                                   (when (buffer-live-p buffer)
                                     (with-current-buffer buffer
                                       (forj-undo--choose-and-rewind
                                        (append (plist-get reply :checkpoints) nil)))))
                        :error #'forj-undo--error))))))

(defun forj-undo--choose-and-rewind (checkpoints)
  "Ask which turn to rewind to and what to rewind; CHECKPOINTS name files."
  (let* ((turns (or (forj-undo--turns checkpoints)
                    (user-error "This chat has no turns to rewind to")))
         (choices (mapcar (lambda (turn) (cons (forj-undo--describe-turn turn) turn)) turns))
         (choice (completing-read "Rewind to before: "
                                  (lambda (string pred action)
                                    (if (eq action 'metadata)
                                        '(metadata (display-sort-function . identity))
                                      (complete-with-action action choices string pred)))
                                  nil t nil nil (caar choices))))
    (forj-undo--rewind (plist-get (cdr (assoc choice choices)) :turn)
                       (pcase (car (read-multiple-choice
                                    "Rewind: "
                                    '((?b "both" "the files and the conversation")
                                      (?c "code" "only the files forj changed")
                                      (?h "chat" "only the conversation"))))
                         (?c 'code) (?h 'chat) (_ 'both)))))

(defun forj-undo--rewind (turn-id what)
  "Rewind to before TURN-ID: WHAT is `code', `chat' or `both'."
  (let ((index (cl-position turn-id (forj-session-record forj-session)
                            :key (lambda (e) (plist-get e :turn)) :test #'equal)))
    (unless index (user-error "No turn %s in this chat" turn-id))
    (pcase what
      ('chat (forj-undo--rewind-chat index))
      ((or 'code 'both)
       (let ((buffer (current-buffer)))
         (forj-undo--run (forj-session-root forj-session) "rewind" (list :turn turn-id)
                         "rewind of the files"
                         (and (eq what 'both)
                              (lambda (_reply)
                                (when (buffer-live-p buffer)
                                  (with-current-buffer buffer
                                    ;; The record may have changed meanwhile.
                                    (let ((now (cl-position turn-id (forj-session-record forj-session)
                                                            :key (lambda (e) (plist-get e :turn))
                                                            :test #'equal)))
                                      (when now (forj-undo--rewind-chat now))))))))))
      (_ (user-error "Rewind `code', `chat' or `both'")))))

(defun forj-undo--rewind-chat (index)
  "Cut the chat back to before its entry at INDEX; put its text in the input.
A draft the user had goes to the kill ring."
  (let ((draft (forj-session-draft))
        (text (string-trim (forj-session-unescape
                            (cdr (forj-session-split-heading (plist-get (nth index (forj-session-record forj-session)) :text)))))))
    (unless (string-blank-p draft)
      (kill-new draft))
    (forj-session-cut-record index text)
    (goto-char (point-max))
    (forj-session-notice "the conversation was rewound to before this message; edit it and send again")))

(provide 'forj-undo)
;;; forj-undo.el ends here
