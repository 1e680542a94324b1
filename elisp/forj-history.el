;;; forj-history.el --- Every chat saved as it goes, and reopened  -*- lexical-binding: t; -*-

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

;; Every chat is saved each time its record changes (a message sent, a
;; reply complete, a batch of results, a notice, a fork or rewind), so
;; a crash of Emacs loses at most the reply being streamed.  A chat is
;; two files in the project's directory under the state directory
;; (`forj-history-directory'):
;;
;;   ID.json   the record (entries with their turn ids and times) and
;;             the provider-side message list the model reads
;;   ID.md     the same transcript as Markdown, readable and openable
;;             as a chat (`forj-save' format)
;;
;; Both are written to a temporary file and renamed, so a crash while
;; saving leaves the previous copy whole.  `M-x forj-resume' lists the
;; project's chats, newest first, and reopens one with its history,
;; ready to continue.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-session)
(require 'forj-loop)

(autoload 'forj-chat-open-session "forj-chat")

(defcustom forj-history-directory nil
  "Where chats are saved as they go; nil: \"chats/\" in forj's state directory.
The state directory is the worker's: `--state-dir' in
`forj-worker-arguments', else $FORJ_STATE_DIR, else
$XDG_STATE_HOME/forj (~/.local/state/forj).  Each project has a
directory of its own below it."
  :type '(choice (const :tag "In the state directory" nil) directory)
  :group 'forj)

(defcustom forj-history-save t
  "Non-nil: save every chat as it goes (see `forj-history-directory')."
  :type 'boolean
  :group 'forj)

(defun forj-history--state-directory ()
  "Return the worker's state directory, found as the worker does."
  (let ((given (cadr (member "--state-dir" (default-value 'forj-worker-arguments)))))
    (file-name-as-directory
     (expand-file-name
      (cond (given given)
            ((getenv "FORJ_STATE_DIR") (getenv "FORJ_STATE_DIR"))
            (t (expand-file-name "forj" (or (getenv "XDG_STATE_HOME") "~/.local/state"))))))))

(defun forj-history-project-directory (root)
  "The directory holding the saved chats of the project ROOT."
  (let* ((root (directory-file-name (file-truename root)))
         (name (or (file-name-nondirectory root) "root")))
    (file-name-as-directory
     (expand-file-name (format "%s-%s" (if (string-empty-p name) "root" name)
                               (substring (secure-hash 'sha256 root) 0 16))
                       (or forj-history-directory
                           (expand-file-name "chats" (forj-history--state-directory)))))))

;;; Saving

(defvar-local forj-history--created nil
  "When this chat was first saved (seconds since the epoch).")
(put 'forj-history--created 'permanent-local t)

(defun forj-history--json (value)
  "VALUE (plists, lists, vectors, strings, numbers) ready for `json-serialize'.
Lists that are not plists become arrays; nil becomes an empty array."
  (cond ((and (consp value) (keywordp (car value)))
         (cl-loop for (key item) on value by #'cddr
                  append (list key (forj-history--json item))))
        ((or (consp value) (vectorp value))
         (vconcat (mapcar #'forj-history--json value)))
        ((null value) [])
        (t value)))

(defun forj-history--title ()
  "The first line of the chat's first message, or nil."
  (let ((first (cl-find "user" (forj-session-record forj-session)
                        :key (lambda (e) (plist-get e :role)) :test #'equal)))
    (when first
      (let ((text (string-trim (cdr (forj-session-split-heading (plist-get first :text))))))
        (car (split-string (forj-session-unescape text) "\n"))))))

(defun forj-history--write (file text)
  "Write TEXT to FILE through a temporary file and a rename."
  (let ((temp (make-temp-file (expand-file-name ".forj-save-" (file-name-directory file))))
        (coding-system-for-write 'utf-8-unix))
    (condition-case err
        (progn
          (write-region text nil temp nil 'silent)
          (rename-file temp file t))
      (error (ignore-errors (delete-file temp))
             (signal (car err) (cdr err))))))

(defun forj-history-save-chat ()
  "Save the current chat's record and messages under its project's directory.
Return the JSON file written, or nil when the chat has no project."
  (when (and (forj-session-root forj-session) (derived-mode-p 'forj-chat-mode))
    (let* ((dir (forj-history-project-directory (forj-session-root forj-session)))
           (id (forj-session-ensure-id))
           (json (expand-file-name (concat id ".json") dir))
           (now (float-time)))
      (make-directory dir t)
      (set-file-modes dir #o700)
      (forj-history--write
       json
       (json-serialize
        (list :version 1
              :id id
              :root (forj-session-root forj-session)
              :created (or forj-history--created (setq forj-history--created now))
              :updated now
              :title (or (forj-history--title) "")
              :provider (or (plist-get (forj-session-provider forj-session) :name) "")
              :record (forj-history--json
                       (mapcar (lambda (entry)
                                 (cl-loop for (key value) on entry by #'cddr
                                          when (memq key '(:role :text :turn :time))
                                          append (list key value)))
                               (forj-session-record forj-session)))
              :messages (forj-history--json (forj-loop-messages)))))
      (forj-history--write (expand-file-name (concat id ".md") dir)
                           (concat (forj-session-transcript) "\n## User\n\n"))
      json)))

(defun forj-history--after-change ()
  "Save the chat after its record changed, unless saving is off.
A failure to save is said once in the echo area; the chat goes on."
  (when forj-history-save
    (condition-case err
        (forj-history-save-chat)
      (error (message "forj: could not save the chat: %s" (error-message-string err))))))

(add-hook 'forj-chat-record-changed-hook #'forj-history--after-change)

;;; Reading and resuming

(defun forj-history-read (file)
  "The saved chat in FILE as a plist (:id :root :record :messages ...)."
  (with-temp-buffer
    (let ((coding-system-for-read 'utf-8))
      (insert-file-contents file))
    (json-parse-buffer :object-type 'plist :array-type 'list :null-object nil :false-object nil)))

(defun forj-history-chats (root)
  "The saved chats of project ROOT, newest first: a list of plists with :file.
A chat without a message of the user's is not listed: there is nothing
in it to go on with."
  (let ((dir (forj-history-project-directory root)))
    (when (file-directory-p dir)
      (sort (delq nil (mapcar (lambda (file)
                                (let ((chat (ignore-errors (forj-history-read file))))
                                  (and chat
                                       (cl-find "user" (plist-get chat :record)
                                                :key (lambda (e) (plist-get e :role)) :test #'equal)
                                       (plist-put chat :file file))))
                              (directory-files dir t "\\.json\\'")))
            (lambda (a b) (> (or (plist-get a :updated) 0) (or (plist-get b :updated) 0)))))))

(defun forj-history--describe (chat)
  "One line naming the saved CHAT: when, its first message, how long."
  (format "%s  %s  (%d messages)"
          (format-time-string "%Y-%m-%d %H:%M" (or (plist-get chat :updated) 0))
          (let ((title (plist-get chat :title)))
            (if (or (null title) (string-empty-p title)) "(no message yet)" title))
          (cl-count "user" (plist-get chat :record) :key (lambda (e) (plist-get e :role)) :test #'equal)))

(defun forj-history-open (file)
  "Open the saved chat in FILE as a chat buffer, ready to continue; return it.
A chat already open is shown instead."
  (let* ((chat (forj-history-read file))
         (root (file-name-as-directory (plist-get chat :root)))
         (open (cl-find-if (lambda (b)
                             (and (eq (buffer-local-value 'major-mode b) 'forj-chat-mode)
                                  (equal (forj-session-id (buffer-local-value 'forj-session b))
                                         (plist-get chat :id))))
                           (buffer-list))))
    (unless (file-directory-p root)
      (user-error "The project of this chat, %s, is gone" root))
    (or open
        (let ((record (mapcar (lambda (entry)
                                (cl-loop for (key value) on entry by #'cddr
                                         when value append (list key value)))
                              (plist-get chat :record)))
              (created (plist-get chat :created)))
          (forj-chat-open-session
           (forj-session-create
            :id (plist-get chat :id) :root root :root-confirmed t :record record
            :turn-id (plist-get (cl-find "user" (reverse record)
                                         :key (lambda (e) (plist-get e :role))
                                         :test #'equal)
                                :turn)
            :provider (forj-history--saved-provider (plist-get chat :provider)))
           (lambda () (setq forj-history--created created)))))))

(defun forj-history--saved-provider (name)
  "The provider NAME the chat used, when no provider is chosen and it can work."
  (let ((provider (and (null forj-provider) (stringp name) (assoc name forj-providers)
                       (append (list :name name) (cdr (assoc name forj-providers))))))
    (and provider
         (or (plist-get provider :local) (forj-provider-key provider))
         provider)))

;;;###autoload
(defun forj-resume (&optional directory)
  "Reopen a saved chat of the project of DIRECTORY (default: the current one).
Chats are listed newest first, with the first line of their first
message; the chosen one opens with its history, ready to continue."
  (interactive)
  (let* ((root (if (derived-mode-p 'forj-chat-mode)
                   (forj-session-root forj-session)
                 (forj-worker-project-root directory)))
         (chats (or (forj-history-chats root)
                    (user-error "No saved chats for %s" (abbreviate-file-name root))))
         (choices (mapcar (lambda (chat) (cons (forj-history--describe chat) chat)) chats))
         (choice (completing-read "Resume chat: "
                                  (lambda (string pred action)
                                    (if (eq action 'metadata)
                                        '(metadata (display-sort-function . identity))
                                      (complete-with-action action choices string pred)))
                                  nil t nil nil (caar choices))))
    (pop-to-buffer-same-window (forj-history-open (plist-get (cdr (assoc choice choices)) :file)))))

(provide 'forj-history)
;;; forj-history.el ends here
