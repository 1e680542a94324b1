;;; forj-commands.el --- Commands of your own: prompt templates sent as /NAME  -*- lexical-binding: t; -*-


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

;; A command is a prompt template in a file NAME.md: in the project's
;; `.forj/commands/' or in your own `forj-commands-user-directory'.  In a
;; chat's input, "/NAME" completes to the commands there are, and a
;; message "/NAME ARGUMENTS" is sent as the template's text with the
;; arguments put in: `$ARGUMENTS' stands for all of them, `$1' to `$9'
;; for each (split as a shell would, quotes grouping words).  A template
;; that names none gets the arguments after it, on a line of their own.
;;
;; Your own command wins over a project's of the same name.  A project's
;; command is text from the repository: the first time it is used (and
;; again whenever its text changed) it is shown, and sent only once you
;; say yes.  A message starting with "/" that names no command is sent
;; as typed.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj-session)

(defcustom forj-commands-user-directory
  (expand-file-name "forj/commands" (or (getenv "XDG_CONFIG_HOME") "~/.config"))
  "The directory of your own commands: one NAME.md file per command /NAME."
  :type 'directory
  :group 'forj)

(defcustom forj-commands-approved-file (locate-user-emacs-file "forj/approved-commands.eld")
  "Where forj remembers the project commands you agreed to send.
Each is remembered by its file and the SHA-256 of its text: a changed
text is shown again before it is sent."
  :type 'file
  :group 'forj)

(defconst forj-commands-name-re "[A-Za-z0-9][A-Za-z0-9_.-]*"
  "What a command's name may be: its file is NAME.md.")

(defun forj-commands--in (directory origin root)
  "The commands of DIRECTORY as (NAME . PLIST), ORIGIN `user' or `project'.
A project's command file must lie inside ROOT, symbolic links resolved."
  (when (and directory (file-directory-p directory))
    (cl-loop for file in (directory-files directory t (concat "\\`" forj-commands-name-re "\\.md\\'"))
             when (and (file-regular-p file) (file-readable-p file)
                       (or (eq origin 'user)
                           (file-in-directory-p (file-truename file) (file-truename root))))
             collect (cons (file-name-base file) (list :file file :origin origin)))))

(defun forj-commands-list (root)
  "List the commands a chat on ROOT has, as (NAME . PLIST), sorted by name.
PLIST has :file and :origin.  Your own command shadows a project's."
  (let ((commands (forj-commands--in forj-commands-user-directory 'user root)))
    (when root
      (dolist (command (forj-commands--in (expand-file-name ".forj/commands" root) 'project root))
        (unless (assoc (car command) commands)
          (push command commands))))
    (sort commands (lambda (a b) (string< (car a) (car b))))))

(defun forj-commands--text (file)
  "The text of FILE, as plain text: nothing in it is evaluated."
  (with-temp-buffer
    (let ((coding-system-for-read 'utf-8))
      (insert-file-contents file))
    (buffer-substring-no-properties (point-min) (point-max))))

(defun forj-commands-fill (template arguments)
  "TEMPLATE with ARGUMENTS (a string) put in for `$ARGUMENTS' and `$1'..`$9'."
  (let* ((words (condition-case nil (split-string-and-unquote arguments)
                  (error (split-string arguments))))
         (named (string-match-p "\\$\\(?:ARGUMENTS\\|[1-9]\\)" template))
         (filled (replace-regexp-in-string
                  "\\$\\(ARGUMENTS\\|[1-9]\\)"
                  (lambda (match)
                    (let ((what (substring match 1)))
                      (if (equal what "ARGUMENTS")
                          arguments
                        (or (nth (1- (string-to-number what)) words) ""))))
                  template t t)))
    (if (or named (string-empty-p arguments))
        filled
      (concat (string-trim-right filled) "\n\n" arguments))))

(defun forj-commands--approved ()
  "The approvals remembered: a list of (FILE . SHA256)."
  (when (file-readable-p forj-commands-approved-file)
    (with-temp-buffer
      (insert-file-contents forj-commands-approved-file)
      (let ((data (ignore-errors (read (current-buffer)))))
        (and (listp data) (cl-every #'consp data) data)))))

(defun forj-commands--remember (file hash)
  "Remember that the project command FILE with text HASH may be sent."
  (let ((approved (cons (cons file hash) (assoc-delete-all file (forj-commands--approved)))))
    (make-directory (file-name-directory forj-commands-approved-file) t)
    (with-temp-file forj-commands-approved-file
      (let ((print-length nil) (print-level nil))
        (prin1 approved (current-buffer))))))

(defun forj-commands--confirm (name file text)
  "Show the project command NAME's TEXT (from FILE) and ask whether to send it.
Asked the first time and whenever TEXT changed; a no is a `user-error'."
  (let ((hash (secure-hash 'sha256 text))
        (truename (file-truename file)))
    (unless (equal (cdr (assoc truename (forj-commands--approved))) hash)
      (with-current-buffer (get-buffer-create "*forj-command*")
        (let ((inhibit-read-only t))
          (erase-buffer)
          (insert (format "The project's command /%s (%s), as it will be sent:\n\n"
                          name (abbreviate-file-name file))
                  text)
          (goto-char (point-min))
          (special-mode))
        (display-buffer (current-buffer)))
      (unless (yes-or-no-p (format "Send the project's command /%s, shown in *forj-command*? " name))
        (user-error "Not sent: the project's command /%s was not confirmed" name))
      (forj-commands--remember truename hash))))

(defun forj-commands-expand (text root)
  "TEXT, a message to send, with a leading \"/NAME ARGUMENTS\" expanded.
The command NAME of ROOT (or your own) gives its template; a message
that names no command comes back as it is.  A project's command is
shown and confirmed first (`forj-commands--confirm')."
  (if (string-match (concat "\\`[ \t\n]*/\\(" forj-commands-name-re "\\)\\(?:[ \t\n]+\\|\\'\\)") text)
      (let* ((name (match-string 1 text))
             (arguments (string-trim (substring text (match-end 0))))
             (command (cdr (assoc name (forj-commands-list root)))))
        (if (null command)
            text
          (let ((template (forj-commands--text (plist-get command :file))))
            (when (eq (plist-get command :origin) 'project)
              (forj-commands--confirm name (plist-get command :file) template))
            (forj-commands-fill template arguments))))
    text))

(defun forj-commands-completion (input root)
  "Completion data for \"/NAME\" at the start of a chat's input on ROOT.
INPUT is where the input starts; nil unless point is in its first
word and that word starts with \"/\"."
  (let ((slash (save-excursion (goto-char input) (skip-chars-forward " \t\n") (point))))
    (when (and (eq (char-after slash) ?/)
               (< slash (point))
               (not (string-match-p "[ \t\n]" (buffer-substring-no-properties slash (point)))))
      (let ((commands (forj-commands-list root)))
        (list (1+ slash) (point)
              (mapcar #'car commands)
              :exclusive 'no
              :annotation-function
              (lambda (name)
                (if (eq (plist-get (cdr (assoc name commands)) :origin) 'project)
                    " (project)"
                  " (yours)")))))))

(defun forj-commands-complete-at-point ()
  "Complete \"/NAME\" at the start of a chat's input with the commands there are.
For `completion-at-point-functions' in a chat."
  (let ((input (forj-session-view 'input)))
    (when (and (markerp input) (>= (point) input) (forj-session-current-root))
      (forj-commands-completion input (forj-session-root forj-session)))))

(provide 'forj-commands)
;;; forj-commands.el ends here
